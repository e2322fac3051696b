/* wg.c — WireGuard control: the driver-independent part (configuration
 * checks, driver choice, address/MTU/up through ip(8), overlay addresses)
 * and helpers the two drivers share. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wg_internal.h"

void wg_hex(const uint8_t key[MESH_WG_KEY_LEN], char out[2 * MESH_WG_KEY_LEN + 1]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < MESH_WG_KEY_LEN; i++) {
        out[2 * i] = digits[key[i] >> 4];
        out[2 * i + 1] = digits[key[i] & 15];
    }
    out[2 * MESH_WG_KEY_LEN] = '\0';
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1; /* the UAPI speaks lowercase only: anything else is malformed */
}

int wg_unhex(const char *s, size_t n, uint8_t key[MESH_WG_KEY_LEN]) {
    if (n != 2 * MESH_WG_KEY_LEN) return -1;
    for (int i = 0; i < MESH_WG_KEY_LEN; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        key[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

/* Strict decimal in [lo, hi], whole string. */
static int parse_int(const char *s, long lo, long hi, long *out) {
    if (!*s || strlen(s) > 10) return -1;
    long v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
    }
    if (v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int wg_parse_cidr(const char *s, wg_cidr *c) {
    char buf[64];
    const char *slash = strchr(s, '/');
    if (!slash || (size_t)(slash - s) >= sizeof buf) return -1;
    memcpy(buf, s, (size_t)(slash - s));
    buf[slash - s] = '\0';
    memset(c, 0, sizeof *c);
    long plen;
    if (inet_pton(AF_INET, buf, c->addr) == 1) {
        c->family = AF_INET;
        if (parse_int(slash + 1, 0, 32, &plen)) return -1;
    } else if (inet_pton(AF_INET6, buf, c->addr) == 1) {
        c->family = AF_INET6;
        if (parse_int(slash + 1, 0, 128, &plen)) return -1;
    } else {
        return -1;
    }
    c->plen = (int)plen;
    return 0;
}

int wg_parse_endpoint(const char *s, struct sockaddr_storage *ss, socklen_t *sslen) {
    char host[64];
    const char *colon;
    memset(ss, 0, sizeof *ss);
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':' || (size_t)(close - s - 1) >= sizeof host) return -1;
        memcpy(host, s + 1, (size_t)(close - s - 1));
        host[close - s - 1] = '\0';
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || (size_t)(colon - s) >= sizeof host) return -1;
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = '\0';
    }
    long port;
    if (parse_int(colon + 1, 1, 65535, &port)) return -1;
    if (s[0] == '[') {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1) return -1;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        *sslen = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)ss;
        if (inet_pton(AF_INET, host, &a->sin_addr) != 1) return -1;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        *sslen = sizeof *a;
    }
    return 0;
}

int wg_run(char *const argv[], const char *ifname, char *err, size_t errlen) {
    int pfd[2];
    if (pipe(pfd)) {
        mesh_errf(err, errlen, "wireguard %s: pipe: %s", ifname, strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        mesh_errf(err, errlen, "wireguard %s: fork: %s", ifname, strerror(errno));
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(pfd[1], 2);
        close(pfd[0]);
        close(pfd[1]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(pfd[1]);
    /* Keep the first bytes of stderr for the message; drain the rest so the
     * child never blocks on a full pipe. */
    char msg[256];
    size_t got = 0;
    for (;;) {
        char tmp[256];
        ssize_t r = read(pfd[0], tmp, sizeof tmp);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        size_t take = (size_t)r < sizeof msg - 1 - got ? (size_t)r : sizeof msg - 1 - got;
        memcpy(msg + got, tmp, take);
        got += take;
    }
    close(pfd[0]);
    msg[got] = '\0';
    while (got > 0 && (msg[got - 1] == '\n' || msg[got - 1] == '\r')) msg[--got] = '\0';
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            mesh_errf(err, errlen, "wireguard %s: waitpid: %s", ifname, strerror(errno));
            return -1;
        }
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
    char cmd[160] = "";
    for (int i = 0; argv[i]; i++) {
        size_t l = strlen(cmd);
        snprintf(cmd + l, sizeof cmd - l, "%s%s", i ? " " : "", argv[i]);
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 127 && !got)
        mesh_errf(err, errlen, "wireguard %s: cannot run '%s'", ifname, argv[0]);
    else
        mesh_errf(err, errlen, "wireguard %s: '%s' failed (status %d): %s", ifname, cmd,
                WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), got ? msg : "");
    return -1;
}

/* MTU, address, up: the same for both drivers, and the interface starts
 * down with MTU 1420, which stalls TCP over a 1400-byte underlay. */
static int configure_link(const mesh_wg_config *cfg, int mtu, char *err, size_t errlen) {
    char ifname[MESH_WG_IFNAME_MAX], mtus[16], addr[80];
    snprintf(ifname, sizeof ifname, "%s", cfg->ifname);
    snprintf(mtus, sizeof mtus, "%d", mtu);
    char *set_mtu[] = {"ip", "link", "set", "dev", ifname, "mtu", mtus, NULL};
    if (wg_run(set_mtu, cfg->ifname, err, errlen)) return -1;
    if (cfg->address) {
        snprintf(addr, sizeof addr, "%s/%d", cfg->address, cfg->prefix_len);
        char *add[] = {"ip", "address", "add", addr, "dev", ifname, NULL};
        if (wg_run(add, cfg->ifname, err, errlen)) return -1;
    }
    char *up[] = {"ip", "link", "set", "dev", ifname, "up", NULL};
    return wg_run(up, cfg->ifname, err, errlen);
}

static int check_name(const char *ifname, char *err, size_t errlen) {
    size_t n = ifname ? strlen(ifname) : 0;
    if (n == 0 || n >= MESH_WG_IFNAME_MAX) {
        mesh_errf(err, errlen, "wireguard: interface name '%s' must have 1 to %d characters",
                ifname ? ifname : "(null)", MESH_WG_IFNAME_MAX - 1);
        return -1;
    }
    /* The name goes into a socket path and ip(8)'s argv: refuse anything
     * that is not a plain name. */
    for (size_t i = 0; i < n; i++) {
        char c = ifname[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || (c == '.' && i > 0))) {
            mesh_errf(err, errlen, "wireguard: interface name '%s' has a character other than "
                    "letters, digits, '-', '_', '.'", ifname);
            return -1;
        }
    }
    return 0;
}

int mesh_wg_open(mesh_wg **out, const mesh_wg_config *cfg, char *err, size_t errlen) {
    *out = NULL;
    if (check_name(cfg->ifname, err, errlen)) return -1;
    int mtu = cfg->mtu ? cfg->mtu : MESH_WG_DEFAULT_MTU;
    if (mtu < 1280 || mtu > 65535) {
        mesh_errf(err, errlen, "wireguard %s: MTU %d outside 1280..65535", cfg->ifname, mtu);
        return -1;
    }
    if (cfg->listen_port < 0 || cfg->listen_port > 65535) {
        mesh_errf(err, errlen, "wireguard %s: listen port %d outside 0..65535", cfg->ifname,
                cfg->listen_port);
        return -1;
    }
    if (cfg->address) {
        char buf[80];
        wg_cidr c;
        snprintf(buf, sizeof buf, "%s/%d", cfg->address, cfg->prefix_len);
        if (wg_parse_cidr(buf, &c)) {
            mesh_errf(err, errlen, "wireguard %s: bad overlay address '%s'", cfg->ifname, buf);
            return -1;
        }
    }
    if (cfg->driver != MESH_WG_AUTO && cfg->driver != MESH_WG_KERNEL &&
        cfg->driver != MESH_WG_USERSPACE) {
        mesh_errf(err, errlen, "wireguard %s: unknown driver %d", cfg->ifname, (int)cfg->driver);
        return -1;
    }
    mesh_wg *wg = calloc(1, sizeof *wg);
    if (!wg) {
        mesh_errf(err, errlen, "wireguard %s: out of memory", cfg->ifname);
        return -1;
    }
    snprintf(wg->ifname, sizeof wg->ifname, "%s", cfg->ifname);
    wg->child = -1;
    int rc = -2;
    if (cfg->driver != MESH_WG_USERSPACE) {
        rc = wg_kernel_open(wg, cfg, err, errlen);
        if (rc == 0) wg->driver = MESH_WG_KERNEL;
        /* AUTO falls back only when the kernel driver is unavailable, not
         * when it failed for another reason (a name in use, ...). */
        if (rc == -1 || (rc == -2 && cfg->driver == MESH_WG_KERNEL)) {
            free(wg);
            return -1;
        }
    }
    if (rc == -2) {
        if (wg_uapi_open(wg, cfg, err, errlen)) {
            free(wg);
            return -1;
        }
        wg->driver = MESH_WG_USERSPACE;
    }
    if (configure_link(cfg, mtu, err, errlen)) {
        mesh_wg_close(wg);
        return -1;
    }
    *out = wg;
    return 0;
}

static int check_peer_args(mesh_wg *wg, const char *endpoint, const char *const *allowed,
                           size_t n, int keepalive, char *err, size_t errlen) {
    struct sockaddr_storage ss;
    socklen_t sl;
    if (endpoint && (strlen(endpoint) >= MESH_WG_ENDPOINT_MAX ||
                     wg_parse_endpoint(endpoint, &ss, &sl))) {
        mesh_errf(err, errlen, "wireguard %s: bad peer endpoint '%s' (IP:port or [IPv6]:port)",
                wg->ifname, endpoint);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        wg_cidr c;
        if (!allowed[i] || wg_parse_cidr(allowed[i], &c)) {
            mesh_errf(err, errlen, "wireguard %s: bad allowed IP '%s' (want IP/len)", wg->ifname,
                    allowed[i] ? allowed[i] : "(null)");
            return -1;
        }
    }
    if (keepalive < 0 || keepalive > 65535) {
        mesh_errf(err, errlen, "wireguard %s: keepalive %d outside 0..65535", wg->ifname,
                keepalive);
        return -1;
    }
    return 0;
}

int mesh_wg_set_peer(mesh_wg *wg, const uint8_t pub[MESH_WG_KEY_LEN], const char *endpoint,
                     const char *const *allowed_ips, size_t n_allowed, int keepalive_s,
                     char *err, size_t errlen) {
    if (check_peer_args(wg, endpoint, allowed_ips, n_allowed, keepalive_s, err, errlen))
        return -1;
    if (wg->driver == MESH_WG_KERNEL)
        return wg_kernel_set_peer(wg, pub, endpoint, allowed_ips, n_allowed, keepalive_s, err,
                                  errlen);
    return wg_uapi_set_peer(wg, pub, endpoint, allowed_ips, n_allowed, keepalive_s, err,
                            errlen);
}

int mesh_wg_remove_peer(mesh_wg *wg, const uint8_t pub[MESH_WG_KEY_LEN], char *err,
                        size_t errlen) {
    if (wg->driver == MESH_WG_KERNEL) return wg_kernel_remove_peer(wg, pub, err, errlen);
    return wg_uapi_remove_peer(wg, pub, err, errlen);
}

int mesh_wg_get_peers(mesh_wg *wg, mesh_wg_peer_info **peers, size_t *npeers, char *err,
                      size_t errlen) {
    *peers = NULL;
    *npeers = 0;
    if (wg->driver == MESH_WG_KERNEL) return wg_kernel_get_peers(wg, peers, npeers, err, errlen);
    return wg_uapi_get_peers(wg, peers, npeers, err, errlen);
}

mesh_wg_driver mesh_wg_driver_in_use(const mesh_wg *wg) { return wg->driver; }
const char *mesh_wg_ifname(const mesh_wg *wg) { return wg->ifname; }

void mesh_wg_close(mesh_wg *wg) {
    if (!wg) return;
    if (wg->driver == MESH_WG_KERNEL)
        wg_kernel_close(wg);
    else
        wg_uapi_close(wg);
    free(wg);
}

/* ------------------------------------------------------ overlay addresses */

/* FNV-1a then a splitmix64 finaliser: not cryptographic, and need not be —
 * public keys are already uniform; this only spreads them over the host
 * bits and stays the same on every node and version. */
static uint64_t key_hash(const uint8_t pub[MESH_WG_KEY_LEN], uint64_t seed) {
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (int i = 0; i < MESH_WG_KEY_LEN; i++) {
        h ^= pub[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
    return h;
}

int mesh_overlay_address(const char *prefix, const uint8_t pub[MESH_WG_KEY_LEN], char *out,
                         size_t outlen, char *err, size_t errlen) {
    wg_cidr c;
    if (!prefix || wg_parse_cidr(prefix, &c)) {
        mesh_errf(err, errlen, "overlay prefix '%s' is not IP/len", prefix ? prefix : "(null)");
        return -1;
    }
    int bytes = c.family == AF_INET ? 4 : 16;
    int host_bits = bytes * 8 - c.plen;
    if (host_bits < 2) {
        mesh_errf(err, errlen, "overlay prefix '%s' leaves no room for host addresses", prefix);
        return -1;
    }
    /* A prefix with host bits set is most likely a typo of another prefix:
     * refuse it rather than guess. */
    for (int b = c.plen; b < bytes * 8; b++) {
        if (c.addr[b / 8] & (0x80 >> (b % 8))) {
            mesh_errf(err, errlen, "overlay prefix '%s' has host bits set", prefix);
            return -1;
        }
    }
    unsigned char a[16];
    memcpy(a, c.addr, sizeof a);
    if (c.family == AF_INET) {
        /* 1 .. 2^host_bits - 2: neither network nor broadcast. */
        uint64_t n = ((uint64_t)1 << host_bits) - 2;
        uint32_t host = (uint32_t)(key_hash(pub, 0) % n + 1);
        uint32_t net = (uint32_t)a[0] << 24 | (uint32_t)a[1] << 16 | (uint32_t)a[2] << 8 | a[3];
        uint32_t v = net | host;
        a[0] = (unsigned char)(v >> 24);
        a[1] = (unsigned char)(v >> 16);
        a[2] = (unsigned char)(v >> 8);
        a[3] = (unsigned char)v;
    } else {
        uint64_t h[2] = {key_hash(pub, 1), key_hash(pub, 2)};
        unsigned char hb[16];
        for (int i = 0; i < 8; i++) {
            hb[i] = (unsigned char)(h[0] >> (56 - 8 * i));
            hb[8 + i] = (unsigned char)(h[1] >> (56 - 8 * i));
        }
        int nonzero = 0;
        for (int b = c.plen; b < 128; b++) {
            unsigned char bit = hb[b / 8] & (0x80 >> (b % 8));
            if (bit) {
                a[b / 8] |= bit;
                nonzero = 1;
            }
        }
        if (!nonzero) a[15] |= 1; /* the all-zero host is the subnet-router anycast */
    }
    char buf[INET6_ADDRSTRLEN];
    if (!inet_ntop(c.family, a, buf, sizeof buf) || strlen(buf) >= outlen) {
        mesh_errf(err, errlen, "overlay address for '%s' does not fit in %zu bytes", prefix,
                outlen);
        return -1;
    }
    memcpy(out, buf, strlen(buf) + 1);
    return 0;
}

/* test_wg.c — WireGuard control (mesh_wg_*, mesh_overlay_address).
 *
 * Always: overlay addresses (inside the prefix, deterministic, spread over
 * keys, never network/broadcast), the UAPI reply parser on canned replies
 * (well formed and malformed), and argument checks. As root with
 * /dev/net/tun and /usr/bin/wireguard-go: two network namespaces joined by
 * a veth pair, a mesh_wg in each, a TCP exchange over the overlay, and the
 * peer state read back (handshake, bytes, the endpoint B learned from A's
 * handshake). Every namespace, link and socket is removed on every path
 * (atexit, signals), and the test checks none is left. */
#define _GNU_SOURCE /* setns, CLONE_NEWNET */
#include "mesh.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

/* Two key pairs made with `wg genkey | wg pubkey` (hex), so the test needs
 * no key code. */
static const char *PRIV_HEX[2] = {
    "18cc7ed2f52d4e61824919eb423fbb7b18c2eed2352224860cdaac1a8624854b",
    "f80bc296401c3d90b3d920e111094b5caba4a0533c5bd6082f6fd96b49806579"};
static const char *PUB_HEX[2] = {
    "109cec5e0e7c4df21576337af1fc8cfde93691c8794ac48ba4c1f4bd7dded16d",
    "2310a3725a955d67e456da710529a1491b7da54d6ccb72ff36b6cad4b38cee4a"};

static void unhex(const char *s, uint8_t out[32]) {
    for (int i = 0; i < 32; i++) sscanf(s + 2 * i, "%2hhx", &out[i]);
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------ overlay addresses */

static void test_overlay(void) {
    char err[256], a[64], b[64];
    uint8_t key[32];
    memset(key, 7, sizeof key);
    CHECK(mesh_overlay_address("10.77.0.0/16", key, a, sizeof a, err, sizeof err) == 0, "%s",
          err);
    CHECK(mesh_overlay_address("10.77.0.0/16", key, b, sizeof b, err, sizeof err) == 0, "%s",
          err);
    CHECK(!strcmp(a, b), "not deterministic: %s vs %s", a, b);
    CHECK(!strncmp(a, "10.77.", 6), "%s outside 10.77.0.0/16", a);

    /* Many keys: inside the prefix, never network/broadcast, and spread. */
    int distinct = 0;
    char prev[64] = "";
    for (int i = 0; i < 2000; i++) {
        memset(key, 0, sizeof key);
        key[0] = (uint8_t)i;
        key[1] = (uint8_t)(i >> 8);
        CHECK(mesh_overlay_address("192.168.5.0/24", key, a, sizeof a, err, sizeof err) == 0,
              "%s", err);
        struct in_addr in;
        CHECK(inet_pton(AF_INET, a, &in) == 1, "%s", a);
        uint32_t v = ntohl(in.s_addr);
        CHECK((v & 0xffffff00u) == 0xc0a80500u, "%s outside 192.168.5.0/24", a);
        CHECK((v & 0xff) != 0 && (v & 0xff) != 255, "%s is network or broadcast", a);
        if (strcmp(a, prev)) distinct++;
        snprintf(prev, sizeof prev, "%s", a);
    }
    CHECK(distinct > 1900, "only %d changes over 2000 keys", distinct);
    /* /30: two usable hosts, always .1 or .2. */
    for (int i = 0; i < 200; i++) {
        memset(key, i, sizeof key);
        CHECK(mesh_overlay_address("10.0.0.4/30", key, a, sizeof a, err, sizeof err) == 0,
              "%s", err);
        CHECK(!strcmp(a, "10.0.0.5") || !strcmp(a, "10.0.0.6"), "/30 gave %s", a);
    }
    /* Two different keys (the test's) differ. */
    uint8_t k0[32], k1[32];
    unhex(PUB_HEX[0], k0);
    unhex(PUB_HEX[1], k1);
    mesh_overlay_address("10.77.0.0/16", k0, a, sizeof a, err, sizeof err);
    mesh_overlay_address("10.77.0.0/16", k1, b, sizeof b, err, sizeof err);
    CHECK(strcmp(a, b), "two keys share %s", a);

    /* IPv6: prefix kept, host bits not all zero, spread. */
    CHECK(mesh_overlay_address("fd5a:1:2:3::/64", k0, a, sizeof a, err, sizeof err) == 0, "%s",
          err);
    CHECK(mesh_overlay_address("fd5a:1:2:3::/64", k1, b, sizeof b, err, sizeof err) == 0, "%s",
          err);
    CHECK(!strncmp(a, "fd5a:1:2:3:", 11) && !strncmp(b, "fd5a:1:2:3:", 11), "%s %s", a, b);
    CHECK(strcmp(a, b), "two keys share %s", a);
    struct in6_addr in6;
    CHECK(inet_pton(AF_INET6, a, &in6) == 1, "%s", a);

    /* Refused: junk, no room, host bits set, tiny buffer. */
    const char *bad[] = {"10.77.0.0", "10.77.0.0/33", "10.77.0.0/31", "10.77.0.0/32",
                         "fd5a::/127", "10.77.1.0/16", "x/8", "10.77.0.0/-1", "10.77.0.0/"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        CHECK(mesh_overlay_address(bad[i], k0, a, sizeof a, err, sizeof err) == -1,
              "accepted %s", bad[i]);
        CHECK(strstr(err, bad[i]) != NULL, "message '%s' does not name %s", err, bad[i]);
    }
    CHECK(mesh_overlay_address("10.77.0.0/16", k0, a, 5, err, sizeof err) == -1,
          "wrote into a 5-byte buffer");
}

/* ------------------------------------------------------------ UAPI parser */

static int parse(const char *s, int *e, mesh_wg_peer_info **p, size_t *n, char *err) {
    /* An exact-size heap copy: under ASan a read past the end fails. */
    size_t len = strlen(s);
    char *buf = malloc(len ? len : 1);
    memcpy(buf, s, len);
    int rc = mesh_wg_uapi_parse(buf, len, "wgt0", e, p, n, err, 256);
    free(buf);
    return rc;
}

static void test_uapi_parse(void) {
    char err[256];
    int e = 99;
    mesh_wg_peer_info *p = NULL;
    size_t n = 7;

    CHECK(parse("errno=0\n\n", &e, NULL, NULL, err) == 0 && e == 0, "set ok: %s", err);
    CHECK(parse("errno=-22\n\n", &e, NULL, NULL, err) == 0 && e == -22, "set -22: %s", err);
    CHECK(parse("errno=0\n\n", &e, &p, &n, err) == 0 && n == 0 && p == NULL, "empty get");

    char reply[2048];
    snprintf(reply, sizeof reply,
             "private_key=%s\nlisten_port=51820\n"
             "public_key=%s\npreshared_key=%064d\nprotocol_version=1\n"
             "endpoint=172.31.250.1:51820\nlast_handshake_time_sec=1700000000\n"
             "last_handshake_time_nsec=123\ntx_bytes=9000\nrx_bytes=18446744073709551\n"
             "persistent_keepalive_interval=25\nallowed_ip=10.77.1.2/32\n"
             "public_key=%s\nendpoint=[fd00::1]:4242\nlast_handshake_time_sec=0\n"
             "last_handshake_time_nsec=0\ntx_bytes=0\nrx_bytes=0\n"
             "persistent_keepalive_interval=0\nsome_future_key=whatever\nerrno=0\n\n",
             PRIV_HEX[0], PUB_HEX[0], 0, PUB_HEX[1]);
    CHECK(parse(reply, &e, &p, &n, err) == 0, "get: %s", err);
    CHECK(e == 0 && n == 2, "errno %d, %zu peers", e, n);
    if (n == 2) {
        uint8_t k0[32], k1[32];
        unhex(PUB_HEX[0], k0);
        unhex(PUB_HEX[1], k1);
        CHECK(!memcmp(p[0].public_key, k0, 32) && !memcmp(p[1].public_key, k1, 32), "keys");
        CHECK(!strcmp(p[0].endpoint, "172.31.250.1:51820"), "endpoint %s", p[0].endpoint);
        CHECK(!strcmp(p[1].endpoint, "[fd00::1]:4242"), "endpoint %s", p[1].endpoint);
        CHECK(p[0].last_handshake_sec == 1700000000 && p[0].last_handshake_nsec == 123,
              "handshake");
        CHECK(p[0].tx_bytes == 9000 && p[0].rx_bytes == 18446744073709551ull, "bytes");
        CHECK(p[0].keepalive == 25 && p[1].keepalive == 0, "keepalive");
        CHECK(p[1].last_handshake_sec == 0 && p[1].rx_bytes == 0, "peer 1 zeros");
    }
    free(p);

    struct {
        const char *reply, *why;
    } bad[] = {
        {"", "empty"},
        {"errno=0\n", "no blank line"},
        {"errno=0", "no newline"},
        {"\n", "blank only"},
        {"listen_port=1\n\n", "no errno"},
        {"errno=0\nlisten_port=1\n\n", "line after errno"},
        {"errno=0\n\nerrno=0\n\n", "bytes after the blank line"},
        {"errno=zero\n\n", "errno not a number"},
        {"errno=\n\n", "empty errno"},
        {"errno=-\n\n", "bare minus"},
        {"errno=99999999999999999999\n\n", "huge errno"},
        {"garbage\nerrno=0\n\n", "not key=value"},
        {"=1\nerrno=0\n\n", "empty key"},
        {"public_key=abc\nerrno=0\n\n", "short key"},
        {"rx_bytes=5\nerrno=0\n\n", "peer field before public_key"},
        {"errno=0\r\n\r\n", "CRLF"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        p = NULL;
        CHECK(parse(bad[i].reply, &e, &p, &n, err) == -1, "accepted: %s", bad[i].why);
        CHECK(strstr(err, "wgt0") && strstr(err, "malformed"), "%s: message '%s'", bad[i].why,
              err);
        CHECK(p == NULL, "%s: peers left allocated", bad[i].why);
    }
    /* Upper-case hex is not what the protocol speaks. */
    char upper[200];
    snprintf(upper, sizeof upper, "public_key=%s\nerrno=0\n\n", PUB_HEX[0]);
    for (char *c = upper + 11; *c != '\n'; c++)
        if (*c >= 'a' && *c <= 'f') *c = (char)(*c - 32);
    CHECK(parse(upper, &e, &p, &n, err) == -1, "accepted upper-case hex");
    /* A set reply carries only errno. */
    CHECK(parse("listen_port=1\nerrno=0\n\n", &e, NULL, NULL, err) == -1,
          "set reply with extra lines accepted");
    /* Counters that overflow or are not digits. */
    char ovf[200];
    snprintf(ovf, sizeof ovf, "public_key=%s\nrx_bytes=99999999999999999999999\nerrno=0\n\n",
             PUB_HEX[0]);
    CHECK(parse(ovf, &e, &p, &n, err) == -1, "accepted an overflowing counter");
    snprintf(ovf, sizeof ovf, "public_key=%s\ntx_bytes=-5\nerrno=0\n\n", PUB_HEX[0]);
    CHECK(parse(ovf, &e, &p, &n, err) == -1, "accepted a negative counter");
}

static void test_open_args(void) {
    char err[256];
    mesh_wg *wg = (mesh_wg *)1;
    mesh_wg_config cfg = {.ifname = "this-name-is-too-long", .driver = MESH_WG_USERSPACE};
    CHECK(mesh_wg_open(&wg, &cfg, err, sizeof err) == -1 && wg == NULL, "long name accepted");
    CHECK(strstr(err, "this-name-is-too-long") != NULL, "%s", err);
    cfg.ifname = "../etc";
    CHECK(mesh_wg_open(&wg, &cfg, err, sizeof err) == -1, "path in name accepted");
    cfg.ifname = "wgok";
    cfg.mtu = 500;
    CHECK(mesh_wg_open(&wg, &cfg, err, sizeof err) == -1 && strstr(err, "wgok"),
          "MTU 500 accepted: %s", err);
    cfg.mtu = 0;
    cfg.address = "10.77.300.1";
    cfg.prefix_len = 16;
    CHECK(mesh_wg_open(&wg, &cfg, err, sizeof err) == -1 && strstr(err, "10.77.300.1"),
          "bad address accepted: %s", err);
}

/* ------------------------------------------- two nodes in two namespaces */

static pid_t owner;
static char ns[2][32], ifn[2][16], veth[2][16], sock[2][64];
static int ns_made;

static int run(char *const argv[], int quiet) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (quiet) {
            int fd = open("/dev/null", O_WRONLY);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
            }
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Kills whatever still runs in our namespaces (a wireguard-go orphaned by
 * a node that was killed), then deletes them (the veth pair goes with
 * them). Only in the process that made them, never in a forked node. */
static void cleanup(void) {
    if (getpid() != owner || !ns_made) return;
    for (int i = 0; i < 2; i++) {
        int pfd[2];
        if (pipe(pfd) == 0) {
            pid_t pid = fork();
            if (pid == 0) {
                dup2(pfd[1], 1);
                close(pfd[0]);
                close(pfd[1]);
                execlp("ip", "ip", "netns", "pids", ns[i], (char *)NULL);
                _exit(127);
            }
            close(pfd[1]);
            char buf[1024];
            size_t got = 0;
            ssize_t r;
            while ((r = read(pfd[0], buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)r;
            close(pfd[0]);
            buf[got] = '\0';
            if (pid > 0) waitpid(pid, NULL, 0);
            for (char *t = strtok(buf, "\n"); t; t = strtok(NULL, "\n")) {
                pid_t victim = (pid_t)atoi(t);
                if (victim > 0) {
                    kill(victim, SIGKILL);
                    waitpid(victim, NULL, 0); /* ours if it was a direct child */
                }
            }
        }
        char *del[] = {"ip", "netns", "del", ns[i], NULL};
        run(del, 1);
        unlink(sock[i]); /* only left when wireguard-go was SIGKILLed */
    }
    ns_made = 0;
}

static void on_signal(int sig) {
    cleanup();
    _exit(128 + sig);
}

static int setup_namespaces(void) {
    for (int i = 0; i < 2; i++) {
        char *add[] = {"ip", "netns", "add", ns[i], NULL};
        ns_made = 1;
        if (run(add, 0)) return -1;
    }
    char *link[] = {"ip", "link", "add", veth[0], "netns", ns[0], "type", "veth", "peer",
                    "name", veth[1], "netns", ns[1], NULL};
    if (run(link, 0)) return -1;
    for (int i = 0; i < 2; i++) {
        char addr[32];
        snprintf(addr, sizeof addr, "172.31.250.%d/24", i + 1);
        char *a[] = {"ip", "-n", ns[i], "address", "add", addr, "dev", veth[i], NULL};
        char *up[] = {"ip", "-n", ns[i], "link", "set", "dev", veth[i], "mtu", "1400", "up",
                      NULL};
        char *lo[] = {"ip", "-n", ns[i], "link", "set", "dev", "lo", "up", NULL};
        if (run(a, 0) || run(up, 0) || run(lo, 0)) return -1;
    }
    return 0;
}

/* One node, in a forked process inside namespace `me`: node 0 connects
 * over the overlay, node 1 answers. Returns its failure count. */
static int node(int me, const char *overlay[2]) {
    int other = 1 - me;
    char err[512];
    int fd = open(strcat(strcpy((char[64]){0}, "/var/run/netns/"), ns[me]), O_RDONLY);
    if (fd < 0 || setns(fd, CLONE_NEWNET)) {
        printf("FAIL node %d: setns: %s\n", me, strerror(errno));
        return 1;
    }
    close(fd);
    mesh_wg_config cfg = {.ifname = ifn[me],
                          .driver = me == 0 ? MESH_WG_AUTO : MESH_WG_USERSPACE,
                          .listen_port = 51820,
                          .address = overlay[me],
                          .prefix_len = 16,
                          .wireguard_go = "/usr/bin/wireguard-go"};
    unhex(PRIV_HEX[me], cfg.private_key);
    mesh_wg *wg;
    if (mesh_wg_open(&wg, &cfg, err, sizeof err)) {
        printf("FAIL node %d: open: %s\n", me, err);
        return 1;
    }
    if (me == 0) {
        /* The UAPI path is global: a second interface of that name is refused. */
        mesh_wg *dup;
        CHECK(mesh_wg_open(&dup, &cfg, err, sizeof err) == -1, "same name opened twice");
    }
    uint8_t pub[32];
    unhex(PUB_HEX[other], pub);
    char allowed[64];
    snprintf(allowed, sizeof allowed, "%s/32", overlay[other]);
    const char *ips[] = {allowed};
    /* Node 1 gets no endpoint for node 0: it must learn it from the
     * handshake, as for a node behind NAT (which keeps it alive). */
    int rc = me == 0 ? mesh_wg_set_peer(wg, pub, "172.31.250.2:51820", ips, 1, 25, err,
                                        sizeof err)
                     : mesh_wg_set_peer(wg, pub, NULL, ips, 1, 0, err, sizeof err);
    CHECK(rc == 0, "node %d: set_peer: %s", me, err);
    CHECK(mesh_wg_set_peer(wg, pub, "nowhere:1", ips, 1, 0, err, sizeof err) == -1 &&
              strstr(err, ifn[me]) && strstr(err, "nowhere"),
          "node %d: bad endpoint accepted: %s", me, err);

    int64_t deadline = now_ms() + 30000;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(7777)};
    inet_pton(AF_INET, overlay[1], &sa.sin_addr);
    char buf[8] = {0};
    if (me == 1) {
        int ls = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        CHECK(bind(ls, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(ls, 1) == 0,
              "listen on %s: %s", overlay[1], strerror(errno));
        struct pollfd pf = {.fd = ls, .events = POLLIN};
        CHECK(poll(&pf, 1, 30000) == 1, "node 1: no connection over the overlay in 30 s");
        int c = accept(ls, NULL, NULL);
        CHECK(c >= 0, "accept");
        if (c >= 0) {
            pf.fd = c;
            size_t got = 0;
            while (got < 4 && poll(&pf, 1, 10000) == 1) {
                ssize_t r = read(c, buf + got, 4 - got);
                if (r <= 0) break;
                got += (size_t)r;
            }
            CHECK(got == 4 && !memcmp(buf, "ping", 4), "node 1 read '%s'", buf);
            CHECK(write(c, "pong", 4) == 4, "write");
            /* Wait for node 0 to finish reading before going away. */
            while (poll(&pf, 1, 10000) == 1 && read(c, buf, sizeof buf) > 0) {}
            close(c);
        }
        close(ls);
    } else {
        int ok = 0;
        while (!ok && now_ms() < deadline) {
            int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
            connect(s, (struct sockaddr *)&sa, sizeof sa);
            struct pollfd pf = {.fd = s, .events = POLLOUT};
            int soerr = -1;
            socklen_t sl = sizeof soerr;
            if (poll(&pf, 1, 4000) == 1) getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &sl);
            if (soerr == 0) {
                fcntl(s, F_SETFL, 0);
                struct timeval tv = {10, 0};
                setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
                ok = write(s, "ping", 4) == 4 && read(s, buf, 4) == 4 && !memcmp(buf, "pong", 4);
                CHECK(ok, "node 0: exchange over the overlay failed ('%s')", buf);
                close(s);
                break;
            }
            close(s);
            nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
        }
        CHECK(ok, "node 0: no TCP connection to %s:7777 over the overlay in 30 s", overlay[1]);
    }

    mesh_wg_peer_info *peers = NULL;
    size_t n = 0;
    CHECK(mesh_wg_get_peers(wg, &peers, &n, err, sizeof err) == 0, "node %d: get: %s", me,
          err);
    CHECK(n == 1, "node %d: %zu peers", me, n);
    if (n == 1) {
        char want[32];
        snprintf(want, sizeof want, "172.31.250.%d:51820", other + 1);
        CHECK(!memcmp(peers[0].public_key, pub, 32), "node %d: peer key", me);
        CHECK(!strcmp(peers[0].endpoint, want), "node %d: endpoint '%s', want %s", me,
              peers[0].endpoint, want);
        CHECK(peers[0].last_handshake_sec > 1600000000, "node %d: handshake at %lld", me,
              (long long)peers[0].last_handshake_sec);
        CHECK(peers[0].rx_bytes > 0 && peers[0].tx_bytes > 0, "node %d: rx %llu tx %llu", me,
              (unsigned long long)peers[0].rx_bytes, (unsigned long long)peers[0].tx_bytes);
        CHECK(peers[0].keepalive == (me == 0 ? 25 : 0), "node %d: keepalive %d", me,
              peers[0].keepalive);
    }
    if (n == 1)
        printf("node %d (%s, %s): peer at %s, rx %llu tx %llu bytes\n", me, ifn[me],
               mesh_wg_driver_in_use(wg) == MESH_WG_KERNEL ? "kernel" : "wireguard-go",
               peers[0].endpoint, (unsigned long long)peers[0].rx_bytes,
               (unsigned long long)peers[0].tx_bytes);
    free(peers);
    if (me == 0) {
        CHECK(mesh_wg_remove_peer(wg, pub, err, sizeof err) == 0, "remove: %s", err);
        CHECK(mesh_wg_get_peers(wg, &peers, &n, err, sizeof err) == 0 && n == 0,
              "after remove: %zu peers (%s)", n, err);
        free(peers);
    }
    mesh_wg_close(wg);
    CHECK(access(sock[me], F_OK) != 0, "node %d: %s left after close", me, sock[me]);
    char *show[] = {"ip", "link", "show", "dev", ifn[me], NULL};
    CHECK(run(show, 1) != 0, "node %d: interface %s left after close", me, ifn[me]);
    return failures;
}

static void test_namespaces(void) {
    if (geteuid() != 0 || access("/dev/net/tun", R_OK | W_OK) ||
        access("/usr/bin/wireguard-go", X_OK)) {
        printf("SKIP namespace test: needs root, /dev/net/tun and /usr/bin/wireguard-go\n");
        return;
    }
    int p = (int)getpid();
    for (int i = 0; i < 2; i++) {
        snprintf(ns[i], sizeof ns[i], "snwg%d%c", p, 'a' + i);
        snprintf(ifn[i], sizeof ifn[i], "snwg%d%c", p, 'a' + i);
        snprintf(veth[i], sizeof veth[i], "snv%d%c", p, 'a' + i);
        snprintf(sock[i], sizeof sock[i], "/var/run/wireguard/%s.sock", ifn[i]);
    }
    owner = getpid();
    atexit(cleanup);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    int64_t t0 = now_ms();
    if (setup_namespaces()) {
        CHECK(0, "could not set up namespaces %s/%s", ns[0], ns[1]);
        cleanup();
        return;
    }
    static char ov[2][64];
    char err[256];
    for (int i = 0; i < 2; i++) {
        uint8_t pub[32];
        unhex(PUB_HEX[i], pub);
        CHECK(mesh_overlay_address("10.77.0.0/16", pub, ov[i], sizeof ov[i], err, sizeof err) ==
                  0, "%s", err);
    }
    const char *overlay[2] = {ov[0], ov[1]};
    fflush(stdout);
    pid_t kids[2];
    for (int i = 0; i < 2; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            int f = node(i, overlay);
            fflush(stdout);
            exit(f ? 1 : 0);
        }
    }
    int64_t deadline = now_ms() + 45000;
    int done[2] = {0, 0};
    while ((!done[0] || !done[1]) && now_ms() < deadline) {
        for (int i = 0; i < 2; i++) {
            int st;
            if (!done[i] && kids[i] > 0 && waitpid(kids[i], &st, WNOHANG) == kids[i]) {
                done[i] = 1;
                CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "node %d failed (status %d)", i,
                      st);
            }
        }
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    }
    for (int i = 0; i < 2; i++) {
        if (!done[i] && kids[i] > 0) {
            CHECK(0, "node %d did not finish in 45 s", i);
            kill(kids[i], SIGKILL);
            waitpid(kids[i], NULL, 0);
        }
    }
    cleanup();
    for (int i = 0; i < 2; i++) {
        char path[128];
        snprintf(path, sizeof path, "/var/run/netns/%s", ns[i]);
        CHECK(access(path, F_OK) != 0, "namespace %s left behind", ns[i]);
        CHECK(access(sock[i], F_OK) != 0, "socket %s left behind", sock[i]);
    }
    printf("namespace test: %.1f s\n", (double)(now_ms() - t0) / 1000);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_overlay();
    test_uapi_parse();
    test_open_args();
    test_namespaces();
    if (failures) printf("%d failure(s)\n", failures);
    else printf("ok\n");
    return failures != 0;
}

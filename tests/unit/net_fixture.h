/* net_fixture.h — what the transport tests share: starting nets on
 * 127.0.0.1, pairing them, building messages, filling buffers. Included by
 * test_net.c and test_net_peers.c only. */
#ifndef SHARDNODE_TEST_NET_FIXTURE_H
#define SHARDNODE_TEST_NET_FIXTURE_H

#include "mesh.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

/* The zero-copy check writes memory the loop thread may be reading, on
 * purpose; ThreadSanitizer rightly calls that a race. */
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1

#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0

#endif

#define RUN "test-run"
#define LONG_MS 30000 /* "never" for a healthy loopback, even on a loaded box */
#define MB ((size_t)1 << 20)

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static inline mesh_net *start(const char *self, bool listen, int port, size_t high_water,
                       int timeout_ms)
{
    mesh_net_config cfg = {.self = self,
                           .run = RUN,
                           .listen_host = listen ? "127.0.0.1" : NULL,
                           .listen_port = port,
                           .timeout_ms = timeout_ms,
                           .send_high_water = high_water};
    mesh_net *n = NULL;
    char err[512] = "";
    if (mesh_net_start(&n, &cfg, err, sizeof err) != 0) {
        printf("FAIL: mesh_net_start(%s): %s\n", self, err);
        exit(1);
    }
    return n;
}

static inline int add_peer(mesh_net *n, const char *name, const char *host, int port)
{
    char err[512] = "";
    int i = mesh_net_add_peer(n, name, host, port, err, sizeof err);
    if (i < 0) {
        printf("FAIL: mesh_net_add_peer(%s): %s\n", name, err);
        exit(1);
    }
    return i;
}

/* Two nodes: "a" listens, "b" dials it. *ab is a's index for b, *ba b's for a. */
static inline void pair(mesh_net **a, mesh_net **b, int *ab, int *ba, size_t hw_a, size_t hw_b)
{
    *a = start("a", true, 0, hw_a, LONG_MS);
    *b = start("b", false, 0, hw_b, LONG_MS);
    *ab = add_peer(*a, "b", NULL, 0);
    *ba = add_peer(*b, "a", "127.0.0.1", mesh_net_port(*a));
    char err[512] = "";
    CHECK(mesh_net_wait_connected(*a, LONG_MS, err, sizeof err) == 0, "a connected: %s", err);
    CHECK(mesh_net_wait_connected(*b, LONG_MS, err, sizeof err) == 0, "b connected: %s", err);
}

static inline mesh_msg tensor_msg(mesh_msg_type type, int64_t step, const void *data, size_t nbytes)
{
    mesh_msg m;
    memset(&m, 0, sizeof m);
    m.type = type;
    m.step = step;
    m.micro = (int32_t)(step % 7);
    m.stage = 1;
    m.dtype = MESH_F32;
    m.ndim = 1;
    m.shape[0] = (int64_t)(nbytes / 4);
    m.data = data;
    m.nbytes = nbytes;
    return m;
}

static inline mesh_msg norm_msg(int64_t step, double value)
{
    mesh_msg m;
    memset(&m, 0, sizeof m);
    m.type = MESH_MSG_NORM;
    m.step = step;
    m.stage = 2;
    m.value = value;
    m.flags = 1;
    return m;
}

static inline void fill(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

static inline size_t sysctl_max(const char *path)
{
    FILE *f = fopen(path, "r");
    unsigned long lo = 0, def = 0, max = 0;
    if (f) {
        if (fscanf(f, "%lu %lu %lu", &lo, &def, &max) != 3)
            max = 0;
        fclose(f);
    }
    return max ? max : 8 * MB;
}

/* Most bytes the kernels of a loopback connection can hold in flight. */
static inline size_t kernel_buffers(void)
{
    return sysctl_max("/proc/sys/net/ipv4/tcp_rmem") + sysctl_max("/proc/sys/net/ipv4/tcp_wmem");
}


static inline int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    bind(fd, (struct sockaddr *)&sa, sizeof sa);
    getsockname(fd, (struct sockaddr *)&sa, &len);
    close(fd);
    return ntohs(sa.sin_port);
}

/* Runs the named tests (all without arguments) and reports: the main() of
 * both transport test programs. */
typedef struct {
    const char *name;
    void (*fn)(void);
} net_test;

static inline int run_net_tests(const net_test *tests, size_t n, int argc, char **argv,
                                const char *what)
{
    /* The raw sockets of the bad-peer tests write to connections the node has
     * closed. */
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t i = 0; i < n; i++) {
        bool run = argc < 2;
        for (int a = 1; a < argc; a++)
            run |= strcmp(argv[a], tests[i].name) == 0;
        if (run)
            tests[i].fn();
    }
    if (failures) {
        printf("%d failure(s)\n", failures);
        return 1;
    }
    printf("all %s tests passed\n", what);
    return 0;
}

#endif

/* transfer.c — framed tensor transfer over the mesh transport against a raw
 * TCP socket on loopback, in one process and one run.
 *
 *     build/bench_transfer [--mib 64] [--rounds 5] [--messages 4] [--high-water MIB]
 *                          [--raw-alloc]
 *
 * Two paths move the same bytes from a sender thread to the receiving (main)
 * thread over 127.0.0.1:
 *
 * - raw: a plain TCP connection (TCP_NODELAY, as the mesh sets it); the
 *   sender write()s each tensor in a loop, the receiver read()s it into one
 *   preallocated buffer. No framing, no allocation: the ceiling. With
 *   --raw-alloc (a diagnostic) it malloc()s and free()s a fresh buffer per
 *   tensor instead, as the mesh's receiver does per frame.
 * - framed: shardnode's path. Two mesh_net instances ("tx" dials "rx");
 *   the sender mesh_net_send()s a MESH_MSG_GRADIENTS message whose data is
 *   the f32 tensor (shape [MIB/4, 1024, 1024], [16, 1024, 1024] for 64 MiB),
 *   then mesh_net_flush()es; the receiver mesh_net_recv()s each frame,
 *   checks its header, spot-checks the data and mesh_frame_free()s it.
 *   Transport settings are the defaults the training engine uses, except
 *   max_frame (twice the tensor) and, with --high-water, send_high_water.
 *
 * A round sends K tensors on one path, timed on the receiver from the
 * sender's go to the last byte received (and, framed, the frame freed).
 * Rounds alternate raw, framed, raw, framed ... R times each, after one
 * untimed warm-up round of each in which every byte is compared. Prints one
 * line per round, the medians of each path in MB/s (10^6 bytes of tensor
 * data per second; frame heads and length prefixes are not counted), the
 * ratio framed / raw, and one JSON line with the same figures. Not part of
 * the pass/fail suite: it exits non-zero only when a transfer fails or
 * delivers wrong bytes, never on a figure. */
#include "mesh.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_MS 60000
#define ERRLEN 512

enum { CMD_IDLE, CMD_RAW, CMD_FRAMED, CMD_QUIT };

typedef struct {
    /* the tensor */
    float *tensor;
    size_t bytes;
    int64_t shape[3];
    int messages;
    bool raw_alloc;
    /* raw path */
    int raw_tx, raw_rx;
    /* framed path */
    mesh_net *tx, *rx;
    int tx_peer;
    /* sender thread control */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int cmd, gen, done_gen, round;
    int rc;
    char err[ERRLEN];
} bench;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("bench_transfer: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n", stderr);
    va_end(ap);
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long parse_long(const char *flag, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        die("%s \"%s\": expected an integer in [%ld, %ld]", flag, s, lo, hi);
    return v;
}

/* The value every element i of the tensor holds: not constant, so a frame
 * shifted by a few bytes or a stale buffer is caught. */
static float pattern(size_t i)
{
    return (float)(i % 1000003) * 0.5f - 7.0f;
}

/* Spot-checks about 65 elements (every 1/64 of the tensor and the last one),
 * or every byte with full. The data may be unaligned (framed payloads). */
static int check_data(const bench *b, const void *data, bool full)
{
    if (full) return memcmp(data, b->tensor, b->bytes) == 0 ? 0 : -1;
    size_t n = b->bytes / sizeof(float), stride = n / 64 ? n / 64 : 1;
    for (size_t i = 0; i < n; i += stride) {
        float x;
        memcpy(&x, (const char *)data + i * sizeof x, sizeof x);
        if (x != pattern(i)) return -1;
    }
    float last;
    memcpy(&last, (const char *)data + (n - 1) * sizeof last, sizeof last);
    return last == pattern(n - 1) ? 0 : -1;
}

/* ------------------------------ raw TCP -------------------------------- */

static void raw_connect(bench *b)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0) die("socket: %s", strerror(errno));
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    socklen_t len = sizeof sa;
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 1) ||
        getsockname(ls, (struct sockaddr *)&sa, &len))
        die("raw listener on 127.0.0.1: %s", strerror(errno));
    b->raw_tx = socket(AF_INET, SOCK_STREAM, 0);
    if (b->raw_tx < 0 || connect(b->raw_tx, (struct sockaddr *)&sa, sizeof sa))
        die("raw connect to 127.0.0.1:%d: %s", ntohs(sa.sin_port), strerror(errno));
    b->raw_rx = accept(ls, NULL, NULL);
    if (b->raw_rx < 0) die("raw accept: %s", strerror(errno));
    close(ls);
    int one = 1;
    setsockopt(b->raw_tx, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(b->raw_rx, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int raw_send(bench *b)
{
    for (int k = 0; k < b->messages; k++) {
        const char *p = (const char *)b->tensor;
        size_t left = b->bytes;
        while (left) {
            ssize_t w = write(b->raw_tx, p, left);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                snprintf(b->err, sizeof b->err, "raw write: %s", strerror(errno));
                return -1;
            }
            p += w;
            left -= (size_t)w;
        }
    }
    return 0;
}

static void raw_recv(bench *b, char *rawbuf, bool full)
{
    for (int k = 0; k < b->messages; k++) {
        char *buf = b->raw_alloc ? malloc(b->bytes) : rawbuf;
        if (!buf) die("out of memory for a %zu-byte buffer", b->bytes);
        size_t got = 0;
        while (got < b->bytes) {
            ssize_t r = read(b->raw_rx, buf + got, b->bytes - got);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) die("raw read: %s", strerror(errno));
            if (r == 0) die("raw read: the sender closed the connection");
            got += (size_t)r;
        }
        if (check_data(b, buf, full)) die("raw path: tensor %d arrived with wrong bytes", k + 1);
        if (b->raw_alloc) free(buf);
    }
}

/* ------------------------------ mesh ----------------------------------- */

static void framed_connect(bench *b, size_t high_water)
{
    char err[ERRLEN];
    size_t max_frame = 2 * b->bytes + (1 << 20);
    mesh_net_config rc = {.self = "rx", .run = "bench-transfer", .listen_host = "127.0.0.1",
                          .timeout_ms = TIMEOUT_MS, .max_frame = max_frame,
                          .send_high_water = high_water};
    if (mesh_net_start(&b->rx, &rc, err, sizeof err)) die("mesh rx: %s", err);
    mesh_net_config tc = {.self = "tx", .run = "bench-transfer", .timeout_ms = TIMEOUT_MS,
                          .max_frame = max_frame, .send_high_water = high_water};
    if (mesh_net_start(&b->tx, &tc, err, sizeof err)) die("mesh tx: %s", err);
    if (mesh_net_add_peer(b->rx, "tx", NULL, 0, err, sizeof err) < 0) die("mesh rx: %s", err);
    b->tx_peer = mesh_net_add_peer(b->tx, "rx", "127.0.0.1", mesh_net_port(b->rx), err, sizeof err);
    if (b->tx_peer < 0) die("mesh tx: %s", err);
    if (mesh_net_wait_connected(b->tx, TIMEOUT_MS, err, sizeof err)) die("mesh tx: %s", err);
    if (mesh_net_wait_connected(b->rx, TIMEOUT_MS, err, sizeof err)) die("mesh rx: %s", err);
}

static int framed_send(bench *b)
{
    for (int k = 0; k < b->messages; k++) {
        mesh_msg m;
        memset(&m, 0, sizeof m);
        m.type = MESH_MSG_GRADIENTS;
        m.step = b->round;
        m.micro = k;
        m.stage = 1;
        m.dtype = MESH_F32;
        m.ndim = 3;
        memcpy(m.shape, b->shape, sizeof b->shape);
        m.data = b->tensor;
        m.nbytes = b->bytes;
        /* the tensor never changes: every message may reference it at once */
        if (mesh_net_send(b->tx, b->tx_peer, &m, b->err, sizeof b->err)) return -1;
    }
    return mesh_net_flush(b->tx, b->tx_peer, TIMEOUT_MS, b->err, sizeof b->err);
}

static void framed_recv(bench *b, bool full)
{
    char err[ERRLEN];
    for (int k = 0; k < b->messages; k++) {
        int peer;
        mesh_msg m;
        mesh_frame *f;
        if (mesh_net_recv(b->rx, &peer, &m, &f, TIMEOUT_MS, err, sizeof err))
            die("framed path, tensor %d: %s", k + 1, err);
        if (m.type != MESH_MSG_GRADIENTS || m.step != b->round || m.micro != k ||
            m.dtype != MESH_F32 || m.ndim != 3 || m.shape[0] != b->shape[0] ||
            m.shape[1] != b->shape[1] || m.shape[2] != b->shape[2] || m.nbytes != b->bytes)
            die("framed path: tensor %d arrived with a wrong header (type %d, step %lld, "
                "micro %d, %zu bytes)", k + 1, (int)m.type, (long long)m.step, (int)m.micro,
                m.nbytes);
        if (check_data(b, m.data, full))
            die("framed path: tensor %d arrived with wrong bytes", k + 1);
        mesh_frame_free(f);
    }
}

/* ------------------------------ the sender thread ---------------------- */

static void *sender_main(void *arg)
{
    bench *b = arg;
    int seen = 0;
    for (;;) {
        pthread_mutex_lock(&b->mu);
        while (b->gen == seen) pthread_cond_wait(&b->cv, &b->mu);
        seen = b->gen;
        int cmd = b->cmd;
        pthread_mutex_unlock(&b->mu);
        if (cmd == CMD_QUIT) return NULL;
        int rc = cmd == CMD_RAW ? raw_send(b) : framed_send(b);
        pthread_mutex_lock(&b->mu);
        b->rc = rc;
        b->done_gen = seen;
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
    }
}

static void sender_go(bench *b, int cmd)
{
    pthread_mutex_lock(&b->mu);
    b->cmd = cmd;
    b->gen++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void sender_wait(bench *b, const char *what)
{
    pthread_mutex_lock(&b->mu);
    while (b->done_gen != b->gen) pthread_cond_wait(&b->cv, &b->mu);
    int rc = b->rc;
    pthread_mutex_unlock(&b->mu);
    if (rc) die("%s sender: %s", what, b->err);
}

/* One round of one path; returns MB/s of tensor data. */
static double run_round(bench *b, int cmd, char *rawbuf, bool full)
{
    b->round++;
    double t0 = now_s();
    sender_go(b, cmd);
    if (cmd == CMD_RAW) raw_recv(b, rawbuf, full);
    else framed_recv(b, full);
    double t1 = now_s();
    sender_wait(b, cmd == CMD_RAW ? "raw" : "framed");
    return (double)b->bytes * b->messages / (t1 - t0) / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    double *s = malloc((size_t)n * sizeof *s);
    if (!s) die("out of memory");
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

static void usage(void)
{
    fputs("usage: bench_transfer [--mib N] [--rounds R] [--messages K] [--high-water MIB]\n"
          "                      [--raw-alloc]\n"
          "  --mib N         tensor size in MiB, a multiple of 4 (default 64: [16, 1024, 1024] f32)\n"
          "  --rounds R      timed rounds of each path, interleaved (default 5)\n"
          "  --messages K    tensors per round (default 4)\n"
          "  --high-water M  the mesh's send_high_water in MiB (default 0: the transport's 64 MiB)\n"
          "  --raw-alloc     diagnostic: the raw receiver mallocs a fresh buffer per tensor,\n"
          "                  as the mesh's receiver does per frame\n",
          stderr);
    exit(2);
}

int main(int argc, char **argv)
{
    long mib = 64, rounds = 5, messages = 4, high_water = 0;
    bool raw_alloc = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) usage();
        if (strcmp(argv[i], "--raw-alloc") == 0) {
            raw_alloc = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench_transfer: %s needs a value\n", argv[i]);
            usage();
        }
        const char *flag = argv[i], *v = argv[++i];
        if (strcmp(flag, "--mib") == 0) mib = parse_long(flag, v, 4, 1020);
        else if (strcmp(flag, "--rounds") == 0) rounds = parse_long(flag, v, 1, 1000);
        else if (strcmp(flag, "--messages") == 0) messages = parse_long(flag, v, 1, 1000);
        else if (strcmp(flag, "--high-water") == 0) high_water = parse_long(flag, v, 0, 4096);
        else {
            fprintf(stderr, "bench_transfer: unknown flag %s\n", flag);
            usage();
        }
    }
    if (mib % 4) die("--mib %ld: must be a multiple of 4 (the tensor is [MIB/4, 1024, 1024] f32)",
                     mib);
    /* a reader that goes away must not kill the process mid-write */
    signal(SIGPIPE, SIG_IGN);

    bench *b = calloc(1, sizeof *b);
    if (!b) die("out of memory");
    b->bytes = (size_t)mib << 20;
    b->shape[0] = mib / 4;
    b->shape[1] = 1024;
    b->shape[2] = 1024;
    b->messages = (int)messages;
    b->raw_alloc = raw_alloc;
    b->tensor = malloc(b->bytes);
    char *rawbuf = malloc(b->bytes);
    if (!b->tensor || !rawbuf) die("out of memory for two %ld MiB buffers", mib);
    size_t n = b->bytes / sizeof(float);
    for (size_t i = 0; i < n; i++) b->tensor[i] = pattern(i);
    memset(rawbuf, 0, b->bytes);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);

    raw_connect(b);
    framed_connect(b, (size_t)high_water << 20);
    pthread_t th;
    if (pthread_create(&th, NULL, sender_main, b)) die("cannot start the sender thread");

    printf("bench_transfer: %ld MiB f32 tensors [%lld, %lld, %lld] over 127.0.0.1, %ld per "
           "round, %ld rounds of each path, interleaved; mesh send_high_water %ld MiB%s\n",
           mib, (long long)b->shape[0], (long long)b->shape[1], (long long)b->shape[2],
           messages, rounds, high_water ? high_water : 64, high_water ? "" : " (default)");
    if (raw_alloc)
        printf("bench_transfer: --raw-alloc: the raw receiver allocates a fresh buffer per "
               "tensor\n");
    /* warm-up: connections, page cache of the buffers, every byte compared */
    double w_raw = run_round(b, CMD_RAW, rawbuf, true);
    double w_fr = run_round(b, CMD_FRAMED, rawbuf, true);
    printf("warm-up   raw %9.1f MB/s   framed %9.1f MB/s   (every byte checked)\n", w_raw, w_fr);
    fflush(stdout);

    double *raw = malloc((size_t)rounds * sizeof *raw), *fr = malloc((size_t)rounds * sizeof *fr);
    if (!raw || !fr) die("out of memory");
    for (long r = 0; r < rounds; r++) {
        raw[r] = run_round(b, CMD_RAW, rawbuf, false);
        fr[r] = run_round(b, CMD_FRAMED, rawbuf, false);
        printf("round %-3ld raw %9.1f MB/s   framed %9.1f MB/s   ratio %.3f\n", r + 1, raw[r],
               fr[r], fr[r] / raw[r]);
        fflush(stdout);
    }
    double mr = median(raw, (int)rounds), mf = median(fr, (int)rounds);
    printf("median    raw %9.1f MB/s   framed %9.1f MB/s\n", mr, mf);
    printf("ratio framed / raw: %.3f (target >= 0.95)\n", mf / mr);
    printf("{\"bench\": \"transfer\", \"tensor_bytes\": %zu, \"shape\": [%lld, %lld, %lld], "
           "\"messages_per_round\": %ld, \"rounds\": %ld, \"send_high_water_mib\": %ld, "
           "\"raw_alloc\": %s, "
           "\"raw_mb_s\": %.1f, \"framed_mb_s\": %.1f, \"ratio\": %.4f, \"target\": 0.95}\n",
           b->bytes, (long long)b->shape[0], (long long)b->shape[1], (long long)b->shape[2],
           messages, rounds, high_water ? high_water : 64, raw_alloc ? "true" : "false", mr, mf,
           mf / mr);
    fflush(stdout);

    sender_go(b, CMD_QUIT);
    pthread_join(th, NULL);
    mesh_net_stop(b->tx);
    mesh_net_stop(b->rx);
    close(b->raw_tx);
    close(b->raw_rx);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(raw);
    free(fr);
    free(rawbuf);
    free(b->tensor);
    free(b);
    return 0;
}

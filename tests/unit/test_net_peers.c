/* test_net_peers.c — the transport against misbehaving connections (garbage,
 * oversized frames, another protocol version or run, undeclared names), which
 * are logged and dropped while the node keeps serving its good peers; frame
 * limits; and link probes answered by the transport itself. */
#include "net_fixture.h"

/* ----------------------------------------------------------------- limits */

static int raw_connect(int port);
static bool closed_by_node(int fd);

static void test_limits(void)
{
    /* A connection that never says HELLO is closed after timeout_ms. */
    mesh_net *a = start("a", true, 0, 0, 500);
    int fd = raw_connect(mesh_net_port(a));
    double t0 = now_s();
    CHECK(fd >= 0 && closed_by_node(fd), "a silent connection was not closed");
    double dt = now_s() - t0;
    CHECK(dt >= 0.4 && dt < 5.5, "silent connection closed after %.2f s", dt);
    if (fd >= 0)
        close(fd);
    mesh_net_stop(a);

    /* max_frame: refused by the sender before queueing, and by a receiver
     * with a smaller limit, which drops that peer. */
    mesh_net_config cfg = {.self = "a", .run = RUN, .listen_host = "127.0.0.1",
                           .timeout_ms = LONG_MS, .max_frame = MB};
    char err[512] = "";
    CHECK(mesh_net_start(&a, &cfg, err, sizeof err) == 0, "start: %s", err);
    /* A port in use is an error naming it, not a node that never listens. */
    mesh_net_config taken = {.self = "c", .run = RUN, .listen_host = "127.0.0.1",
                             .listen_port = mesh_net_port(a)};
    mesh_net *c = NULL;
    char port[32];
    snprintf(port, sizeof port, ":%d", mesh_net_port(a));
    CHECK(mesh_net_start(&c, &taken, err, sizeof err) != 0 && c == NULL && strstr(err, port),
          "listening on a port in use: %s", err);
    printf("port in use: %s\n", err);
    mesh_net *b = start("b", false, 0, 0, LONG_MS);
    int ab = add_peer(a, "b", NULL, 0);
    int ba = add_peer(b, "a", "127.0.0.1", mesh_net_port(a));
    CHECK(mesh_net_wait_connected(b, LONG_MS, err, sizeof err) == 0, "b: %s", err);
    CHECK(mesh_net_wait_connected(a, LONG_MS, err, sizeof err) == 0, "a: %s", err);
    uint8_t *buf = calloc(1, 2 * MB);
    mesh_msg m = tensor_msg(MESH_MSG_GRADIENTS, 0, buf, 2 * MB);
    CHECK(mesh_net_send(a, ab, &m, err, sizeof err) != 0 && strstr(err, "exceeds the limit"),
          "a sent a frame over its own limit: %s", err);
    CHECK(mesh_net_send(b, ba, &m, err, sizeof err) == 0, "b sends 2 MB: %s", err);
    int peer;
    mesh_frame *f;
    CHECK(mesh_net_recv(a, &peer, &m, &f, LONG_MS, err, sizeof err) != 0 && peer == ab &&
              strstr(err, "peer b (127.0.0.1:") && strstr(err, "exceeds the limit of 1048576"),
          "a over its limit: %s", err);
    CHECK(mesh_net_recv(b, &peer, &m, &f, LONG_MS, err, sizeof err) != 0 && peer == ba &&
              strstr(err, "peer a (127.0.0.1:"),
          "b after a hung up: %s", err);
    /* b's tensor may still be referenced until its buffers are freed:
     * flush returns when it is not. Whether part of it was still unsent
     * when a hung up (an error naming a) depends on the kernels' buffers. */
    err[0] = 0;
    int rc = mesh_net_flush(b, ba, LONG_MS, err, sizeof err);
    CHECK(rc == 0 || (strstr(err, "peer a") && strstr(err, "were not sent")),
          "flush to a gone peer: %s", err);
    free(buf);
    mesh_net_stop(b);
    mesh_net_stop(a);
}

/* --------------------------------------------------------------- bad peers */

static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        CHECK(0, "raw connect: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static void raw_send(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t k = write(fd, b, n);
        if (k <= 0)
            return; /* the node may already have hung up: that is the point */
        b += k;
        n -= (size_t)k;
    }
}

/* True once the node closes the connection (reading whatever it sent). */
static bool closed_by_node(int fd)
{
    double t0 = now_s();
    uint8_t buf[4096];
    while (now_s() - t0 < 10) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 200) <= 0)
            continue;
        ssize_t k = read(fd, buf, sizeof buf);
        if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN))
            return true;
    }
    return false;
}

static void raw_frame(int fd, const mesh_msg *m)
{
    uint8_t *head;
    size_t len;
    char err[256];
    if (mesh_encode_head(m, &head, &len, err, sizeof err) != 0) {
        CHECK(0, "encode: %s", err);
        return;
    }
    raw_send(fd, head, len);
    free(head);
}

static mesh_msg hello(const char *name, const char *run)
{
    mesh_msg h;
    memset(&h, 0, sizeof h);
    h.type = MESH_MSG_HELLO;
    h.run_id = mesh_run_id(run);
    snprintf(h.name, sizeof h.name, "%s", name);
    snprintf(h.text, sizeof h.text, "%s", run);
    return h;
}

/* A HELLO of protocol version 1 (an older build), packed by hand: the
 * encoder always writes this build's version. */
static void raw_hello_v1(int fd)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 5);
    const char *keys[] = {"v", "t", "run", "name", "text"};
    for (int k = 0; k < 5; k++) {
        msgpack_pack_str(&pk, strlen(keys[k]));
        msgpack_pack_str_body(&pk, keys[k], strlen(keys[k]));
        switch (k) {
        case 0: msgpack_pack_uint32(&pk, 1); break;
        case 1: msgpack_pack_uint32(&pk, MESH_MSG_HELLO); break;
        case 2: msgpack_pack_uint64(&pk, mesh_run_id(RUN)); break;
        case 3: msgpack_pack_str(&pk, 5), msgpack_pack_str_body(&pk, "carol", 5); break;
        case 4:
            msgpack_pack_str(&pk, strlen(RUN));
            msgpack_pack_str_body(&pk, RUN, strlen(RUN));
            break;
        }
    }
    uint8_t prefix[4];
    for (int i = 0; i < 4; i++)
        prefix[i] = (uint8_t)(sb.size >> (8 * i));
    raw_send(fd, prefix, 4);
    raw_send(fd, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

/* a keeps answering b between the bad connections. */
static void check_still_answers(mesh_net *a, mesh_net *b, int ab, int ba, int64_t step)
{
    char err[512] = "";
    mesh_msg m = norm_msg(step, 1.0);
    int peer;
    mesh_frame *f;
    CHECK(mesh_net_send(b, ba, &m, err, sizeof err) == 0, "b sends: %s", err);
    CHECK(mesh_net_recv(a, &peer, &m, &f, LONG_MS, err, sizeof err) == 0 && peer == ab &&
              m.step == step,
          "a receives %lld: %s", (long long)step, err);
    mesh_frame_free(f);
    m = norm_msg(step, 2.0);
    CHECK(mesh_net_send(a, ab, &m, err, sizeof err) == 0, "a sends: %s", err);
    CHECK(mesh_net_recv(b, &peer, &m, &f, LONG_MS, err, sizeof err) == 0 && peer == ba &&
              m.step == step,
          "b receives %lld: %s", (long long)step, err);
    mesh_frame_free(f);
}

static void test_bad_peers(void)
{
    mesh_net *a, *b;
    int ab, ba;
    pair(&a, &b, &ab, &ba, 0, 0);
    int ac = add_peer(a, "carol", NULL, 0);
    int port = mesh_net_port(a);

    /* The node's log goes to a file for this part, to check its lines. */
    char logpath[512];
    snprintf(logpath, sizeof logpath, "%s/test_net_%d.log", SHARDNODE_TEST_TMP, (int)getpid());
    fflush(stderr);
    int saved = dup(2);
    int logfd = open(logpath, O_RDWR | O_CREAT | O_TRUNC, 0644);
    dup2(logfd, 2);

    struct {
        const char *what;
        int kind;
    } cases[] = {
        {"HTTP request", 0}, {"garbage with a small length", 1}, {"length over the limit", 2},
        {"HELLO of protocol version 1", 3}, {"HELLO from an undeclared name", 4},
        {"HELLO of another run", 5}, {"a message before HELLO", 6},
        {"HELLO as a peer already connected", 7}, {"a frame of another run", 8},
        {"HELLO as a peer declared with an address", 9},
    };
    int64_t step = 100;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int fd = raw_connect(port);
        if (fd < 0)
            continue;
        switch (cases[i].kind) {
        case 0: raw_send(fd, "GET / HTTP/1.0\r\n\r\n", 18); break;
        case 1: {
            uint8_t g[20] = {16, 0, 0, 0};
            memset(g + 4, 0xc1, 16);
            raw_send(fd, g, sizeof g);
            break;
        }
        case 2: raw_send(fd, "\x00\x00\x00\x80", 4); break;
        case 3: raw_hello_v1(fd); break;
        case 4: {
            mesh_msg h = hello("mallory", RUN);
            raw_frame(fd, &h);
            break;
        }
        case 5: {
            mesh_msg h = hello("carol", "another-run");
            raw_frame(fd, &h);
            break;
        }
        case 6: {
            mesh_msg m = norm_msg(1, 1);
            m.run_id = mesh_run_id(RUN);
            raw_frame(fd, &m);
            break;
        }
        case 7: {
            mesh_msg h = hello("b", RUN);
            raw_frame(fd, &h);
            break;
        }
        case 8: {
            mesh_msg h = hello("carol", RUN);
            raw_frame(fd, &h);
            mesh_msg m = norm_msg(1, 1);
            m.run_id = mesh_run_id("another-run");
            raw_frame(fd, &m);
            break;
        }
        case 9: {
            /* Declared with an address on a: a dials it and refuses it here. */
            int ad = add_peer(a, "dave", "127.0.0.1", free_port());
            (void)ad;
            mesh_msg h = hello("dave", RUN);
            raw_frame(fd, &h);
            break;
        }
        }
        CHECK(closed_by_node(fd), "%s: the node did not hang up", cases[i].what);
        close(fd);
        if (cases[i].kind == 8) {
            /* carol was declared and got as far as HELLO: its loss is news
             * for recv, naming it. */
            int peer;
            mesh_msg m;
            mesh_frame *f;
            char err[512] = "";
            CHECK(mesh_net_recv(a, &peer, &m, &f, LONG_MS, err, sizeof err) != 0 && peer == ac &&
                      strstr(err, "peer carol (127.0.0.1:") && strstr(err, "another run"),
                  "carol's loss: %s", err);
        }
        check_still_answers(a, b, ab, ba, step++);
    }

    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char log[16384] = "";
    ssize_t k = pread(logfd, log, sizeof log - 1, 0);
    log[k > 0 ? k : 0] = 0;
    close(logfd);
    unlink(logpath);
    printf("--- the node's log of the bad peers ---\n%s---\n", log);
    const char *want[] = {
        "shardnode mesh: peer 127.0.0.1:",
        ": first frame of 542393671 bytes is too large for a HELLO",
        "does not decode",
        ": frame of 2147483648 bytes exceeds the limit of 1073741824; disconnecting",
        "protocol version 1, this node speaks 2",
        "\"mallory\", which is not a declared peer",
        "is for run \"another-run\"",
        "sent NORM before HELLO",
        "\"b\", which is already connected",
        "peer carol (127.0.0.1:",
        "sent a frame of another run",
        "\"dave\", which is declared with an address",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(strstr(log, want[i]), "the log lacks \"%s\"", want[i]);
    mesh_net_stop(b);
    mesh_net_stop(a);
}

/* ------------------------------------------------------------ link probes */

struct probe_traffic {
    mesh_net *n;
    int peer;
    int count;
    const uint8_t *tensor;
    size_t nbytes;
};

/* Messages of other types sent while the other side probes. */
static void *probe_traffic(void *arg)
{
    struct probe_traffic *t = arg;
    char err[512] = "";
    for (int i = 0; i < t->count; i++) {
        mesh_msg m = i % 5 == 4 ? tensor_msg(MESH_MSG_GRADIENTS, 100 + i, t->tensor, t->nbytes)
                                : norm_msg(100 + i, (double)i);
        CHECK(mesh_net_send(t->n, t->peer, &m, err, sizeof err) == 0, "traffic send: %s", err);
        sleep_ms(2);
    }
    CHECK(mesh_net_flush(t->n, t->peer, LONG_MS, err, sizeof err) == 0, "traffic flush: %s",
          err);
    return NULL;
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? -1 : a > b;
}

static int64_t median3(const int64_t *v)
{
    int64_t s[3] = {v[0], v[1], v[2]};
    qsort(s, 3, sizeof *s, cmp_i64);
    return s[1];
}

static void test_probe(void)
{
    mesh_net *a, *b;
    int ab, ba;
    pair(&a, &b, &ab, &ba, 0, 0);
    char err[512] = "";
    int peer;
    mesh_frame *f;
    mesh_msg m;

    /* b probes a while a (whose compute thread never answers: its loop
     * does) sends b messages of other types: queued before the probe and
     * arriving during it. */
    size_t tn = 256 * 1024;
    uint8_t *tensor = malloc(tn);
    fill(tensor, tn, 11);
    struct probe_traffic tr = {.n = a, .peer = ab, .count = 40, .tensor = tensor, .nbytes = tn};
    pthread_t th;
    pthread_create(&th, NULL, probe_traffic, &tr);
    sleep_ms(10);
    const size_t sizes[3] = {64, MB, 8 * MB};
    int64_t rtt[9];
    memset(rtt, 0, sizeof rtt);
    CHECK(mesh_net_probe(b, ba, sizes, 3, 3, rtt, err, sizeof err) == 0, "probe: %s", err);
    pthread_join(th, NULL);
    for (int i = 0; i < 9; i++)
        CHECK(rtt[i] > 0, "rtt[%d] = %lld", i, (long long)rtt[i]);
    int64_t m64 = median3(rtt), m1 = median3(rtt + 3), m8 = median3(rtt + 6);
    CHECK(m64 < m1 && m1 < m8, "round trips grow with size: %lld %lld %lld ns",
          (long long)m64, (long long)m1, (long long)m8);
    if (m8 > m64)
        printf("probe (loopback): 64 B %.1f us, 1 MiB %.1f us, 8 MiB %.1f us; "
               "latency ~%.1f us, bandwidth ~%.2f GB/s\n",
               m64 / 1e3, m1 / 1e3, m8 / 1e3, m64 / 2e3,
               2.0 * (double)(8 * MB - 64) / (double)(m8 - m64));
    /* Every other message, in order, intact. */
    for (int i = 0; i < tr.count; i++) {
        int rc = mesh_net_recv(b, &peer, &m, &f, LONG_MS, err, sizeof err);
        CHECK(rc == 0 && peer == ba && m.step == 100 + i &&
                  m.type == (i % 5 == 4 ? MESH_MSG_GRADIENTS : MESH_MSG_NORM) &&
                  (i % 5 != 4 || (m.nbytes == tn && memcmp(m.data, tensor, tn) == 0)),
              "message %d after the probe: rc %d step %lld type %d: %s", i, rc,
              (long long)m.step, (int)m.type, err);
        mesh_frame_free(f);
    }
    /* No probe reply was left behind. */
    CHECK(mesh_net_recv(b, &peer, &m, &f, 50, err, sizeof err) != 0, "a message too many: %d",
          (int)m.type);
    mesh_frame_free(f);

    /* Both ways at once: each loop answers the other's probes. */
    const size_t one[2] = {0, 4096};
    int64_t r2[4];
    CHECK(mesh_net_probe(a, ab, one, 2, 2, r2, err, sizeof err) == 0 && r2[0] > 0 && r2[3] > 0,
          "probe a to b: %s", err);

    /* Refusals. */
    const size_t huge[1] = {MESH_PROBE_MAX + 1};
    CHECK(mesh_net_probe(b, ba, huge, 1, 1, rtt, err, sizeof err) != 0 &&
              strstr(err, "peer a") && strstr(err, "over the limit"),
          "probe too large: %s", err);
    CHECK(mesh_net_probe(b, 5, sizes, 1, 1, rtt, err, sizeof err) != 0 &&
              strstr(err, "no peer with index 5"),
          "probe of no peer: %s", err);
    CHECK(mesh_net_probe(b, ba, sizes, 0, 1, rtt, err, sizeof err) != 0 &&
              strstr(err, "at least one size"),
          "probe of no sizes: %s", err);

    /* A dead peer: the probe fails naming it, and recv still reports the
     * loss afterwards. */
    mesh_net_stop(a);
    double t0 = now_s();
    int rc = mesh_net_probe(b, ba, sizes, 3, 1, rtt, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "peer a (127.0.0.1:") && now_s() - t0 < 5,
          "probe of a dead peer: %s", err);
    printf("dead: %s\n", err);
    rc = mesh_net_recv(b, &peer, &m, &f, LONG_MS, err, sizeof err);
    CHECK(rc != 0 && peer == ba && strstr(err, "peer a"), "recv after the probe: %s", err);
    free(tensor);
    mesh_net_stop(b);
}

/* With arguments, runs only the named tests (for debugging one). */
/* A raw connection to 127.0.0.1:port from the source address src. */
static int raw_connect_from(const char *src, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in me = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &me.sin_addr);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(fd, (struct sockaddr *)&me, sizeof me) != 0 ||
        connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        CHECK(0, "raw connect from %s: %s", src, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* Issue 12, finding 9: a connection that claims a peer's public name from
 * another address is dropped without disturbing the run, and the real peer
 * still gets in; a peer may send no frame larger than what it is allowed
 * (the tensor the plan says comes from it), not the net's 1 GiB. */
static void test_impostors(void)
{
    char err[512] = "";
    mesh_net *a = start("a", true, 0, 0, LONG_MS);
    int port = mesh_net_port(a);
    /* b must come from 127.0.0.2 and may send 4 KiB frames at most */
    mesh_net_peer_opts opts = {.from = "127.0.0.2", .max_frame = 4096};
    int ab = mesh_net_add_peer_opts(a, "b", NULL, 0, &opts, err, sizeof err);
    CHECK(ab >= 0, "add b: %s", err);

    /* an impostor on 127.0.0.1 with b's name: refused, and closing it
     * leaves a waiting for b */
    int fd = raw_connect_from("127.0.0.1", port);
    mesh_msg h = hello("b", RUN);
    raw_frame(fd, &h);
    CHECK(closed_by_node(fd), "an impostor from 127.0.0.1 was not disconnected");
    close(fd);
    CHECK(mesh_net_wait_connected(a, 300, err, sizeof err) != 0 && strstr(err, "b (has not "
                                                                             "connected here)"),
          "after an impostor: %s", err);

    /* the real b, bound to its address, gets in */
    mesh_net_config cb = {.self = "b", .run = RUN, .timeout_ms = LONG_MS,
                          .bind_host = "127.0.0.2"};
    mesh_net *b = NULL;
    CHECK(mesh_net_start(&b, &cb, err, sizeof err) == 0, "start b: %s", err);
    int ba = add_peer(b, "a", "127.0.0.1", port);
    CHECK(mesh_net_wait_connected(a, LONG_MS, err, sizeof err) == 0, "a: %s", err);
    CHECK(mesh_net_wait_connected(b, LONG_MS, err, sizeof err) == 0, "b: %s", err);
    check_still_answers(a, b, ab, ba, 1);

    /* a second connection under b's name from b's address: refused, b stays */
    fd = raw_connect_from("127.0.0.2", port);
    raw_frame(fd, &h);
    CHECK(closed_by_node(fd), "a second b was not disconnected");
    close(fd);
    check_still_answers(a, b, ab, ba, 2);

    /* a frame over b's bound: its connection is closed, named */
    static float big[2048];
    mesh_msg m = tensor_msg(MESH_MSG_GRADIENTS, 3, big, sizeof big);
    CHECK(mesh_net_send(b, ba, &m, err, sizeof err) == 0, "b sends: %s", err);
    mesh_frame *f = NULL;
    int peer = -1;
    CHECK(mesh_net_recv(a, &peer, &m, &f, LONG_MS, err, sizeof err) != 0 && peer == ab &&
              strstr(err, "exceeds the limit of 4096"),
          "a frame over the peer's bound: %s", err);
    mesh_frame_free(f);
    mesh_net_flush(b, ba, LONG_MS, err, sizeof err);
    mesh_net_stop(b);
    mesh_net_stop(a);

    /* a wildcard address (a cluster's 0.0.0.0 for a node nobody dials)
     * checks nothing: its peer gets in from anywhere */
    a = start("a", true, 0, 0, LONG_MS);
    opts = (mesh_net_peer_opts){.from = "0.0.0.0"};
    ab = mesh_net_add_peer_opts(a, "b", NULL, 0, &opts, err, sizeof err);
    CHECK(ab >= 0, "add b from 0.0.0.0: %s", err);
    b = start("b", false, 0, 0, LONG_MS);
    ba = add_peer(b, "a", "127.0.0.1", mesh_net_port(a));
    CHECK(mesh_net_wait_connected(a, LONG_MS, err, sizeof err) == 0, "a: %s", err);
    CHECK(mesh_net_wait_connected(b, LONG_MS, err, sizeof err) == 0, "b: %s", err);
    mesh_net_stop(b);
    mesh_net_stop(a);
}

/* A HELLO MAC (a key both ends hold, e.g. derived from their WireGuard
 * keys): a HELLO under the peer's name without it, or with a wrong one, is
 * dropped and the peer still awaited, whatever address it comes from; the
 * dialling side refuses an answer without it too (a squatter on the port). */
static void test_hello_mac(void)
{
    char err[512] = "";
    uint8_t key[MESH_HELLO_KEY_LEN], other[MESH_HELLO_KEY_LEN];
    for (int i = 0; i < MESH_HELLO_KEY_LEN; i++)
        key[i] = (uint8_t)(i * 7 + 1), other[i] = (uint8_t)(i * 7 + 2);
    mesh_net *a = start("a", true, 0, 0, LONG_MS);
    int port = mesh_net_port(a);
    mesh_net_peer_opts opts = {.hello_key = key};
    int ab = mesh_net_add_peer_opts(a, "b", NULL, 0, &opts, err, sizeof err);
    CHECK(ab >= 0, "add b: %s", err);

    /* no MAC, then a MAC under another key: both dropped */
    int fd = raw_connect(port);
    mesh_msg h = hello("b", RUN);
    raw_frame(fd, &h);
    CHECK(closed_by_node(fd), "a HELLO without a MAC was not refused");
    close(fd);
    fd = raw_connect(port);
    snprintf(h.text, sizeof h.text, "%s #%s", RUN, "0123456789abcdef0123456789abcdef");
    raw_frame(fd, &h);
    CHECK(closed_by_node(fd), "a HELLO with a wrong MAC was not refused");
    close(fd);
    CHECK(mesh_net_wait_connected(a, 300, err, sizeof err) != 0 && strstr(err, "b (has not"),
          "after two impostors: %s", err);

    /* a dialler with another key refuses a's answer (and a refuses it) */
    mesh_net *x = start("b", false, 0, 0, 1500);
    opts.hello_key = other;
    CHECK(mesh_net_add_peer_opts(x, "a", "127.0.0.1", port, &opts, err, sizeof err) >= 0, "%s",
          err);
    CHECK(mesh_net_wait_connected(x, 1500, err, sizeof err) != 0, "a key mismatch connected");
    mesh_net_stop(x);

    /* the real b */
    mesh_net *b = start("b", false, 0, 0, LONG_MS);
    opts.hello_key = key;
    int ba = mesh_net_add_peer_opts(b, "a", "127.0.0.1", port, &opts, err, sizeof err);
    CHECK(ba >= 0, "%s", err);
    CHECK(mesh_net_wait_connected(a, LONG_MS, err, sizeof err) == 0, "a: %s", err);
    CHECK(mesh_net_wait_connected(b, LONG_MS, err, sizeof err) == 0, "b: %s", err);
    check_still_answers(a, b, ab, ba, 1);
    mesh_net_stop(b);
    mesh_net_stop(a);
}

int main(int argc, char **argv)
{
    static const net_test tests[] = {
        {"limits", test_limits},
        {"bad_peers", test_bad_peers},
        {"probe", test_probe},
        {"impostors", test_impostors},
        {"hello_mac", test_hello_mac},
    };
    return run_net_tests(tests, sizeof tests / sizeof tests[0], argc, argv, "net peer");
}

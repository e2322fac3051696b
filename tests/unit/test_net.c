/* test_net.c — the peer transport over real sockets on 127.0.0.1: HELLO and
 * messages both ways in order and intact, tensors sent by reference,
 * backpressure on both ends, connect retries, timeouts, and dead peers
 * (closed, and a forked child killed with SIGKILL). test_net_peers.c has
 * misbehaving connections and link probes.
 *
 * Pass or fail never depends on speed: waits are bounded by generous
 * timeouts, and "promptly" means within 5 s. sigkill runs first: it forks,
 * and no thread may exist yet. */
#include "net_fixture.h"

/* ---------------------------------------------------------------- exchange */

#define NBIG 3
#define BIG (4 * MB + 12)
#define NSMALL 2000

struct sender {
    mesh_net *n;
    int peer;
    uint32_t seed;
    int rc;
    char err[512];
};

/* Big tensors with labels, then many small messages: steps count up so the
 * receiver can check order across both kinds. */
static void *send_stream(void *arg)
{
    struct sender *s = arg;
    uint8_t *big[NBIG] = {0};
    float(*g)[3] = NULL;
    int32_t labels[5] = {1, -100, 3, 4, (int32_t)s->seed};
    int64_t step = 0;
    for (int i = 0; i < NBIG; i++) {
        big[i] = malloc(BIG);
        fill(big[i], BIG, s->seed + (uint32_t)i);
        mesh_msg m = tensor_msg(MESH_MSG_ACTIVATIONS, step++, big[i], BIG);
        m.labels = labels;
        m.nlabels = 5;
        m.kept = 4;
        if ((s->rc = mesh_net_send(s->n, s->peer, &m, s->err, sizeof s->err)) != 0)
            goto out;
    }
    /* Many small tensors queued together, each alive until the final flush. */
    g = malloc(NSMALL * sizeof *g);
    for (int i = 0; i < NSMALL; i++) {
        mesh_msg m;
        if (i % 2) {
            m = norm_msg(step++, i * 0.25);
        } else {
            g[i][0] = (float)i, g[i][1] = 0.5f, g[i][2] = (float)s->seed;
            m = tensor_msg(MESH_MSG_GRADIENTS, step++, g[i], sizeof g[i]);
        }
        if ((s->rc = mesh_net_send(s->n, s->peer, &m, s->err, sizeof s->err)) != 0)
            goto out;
    }
    mesh_msg commit;
    memset(&commit, 0, sizeof commit);
    commit.type = MESH_MSG_COMMIT;
    commit.step = step++;
    commit.value = 2.5;
    if ((s->rc = mesh_net_send(s->n, s->peer, &commit, s->err, sizeof s->err)) != 0)
        goto out;
    s->rc = mesh_net_flush(s->n, s->peer, LONG_MS, s->err, sizeof s->err);
out:
    /* Even after a failure: flush waits until libevent let go of them. */
    mesh_net_flush(s->n, s->peer, LONG_MS, NULL, 0);
    for (int i = 0; i < NBIG; i++)
        free(big[i]);
    free(g);
    return NULL;
}

static void receive_stream(mesh_net *n, int from, uint32_t seed)
{
    uint8_t *want = malloc(BIG);
    int64_t step = 0;
    char err[512];
    for (int i = 0; i < NBIG + NSMALL + 1; i++, step++) {
        int peer;
        mesh_msg m;
        mesh_frame *f;
        if (mesh_net_recv(n, &peer, &m, &f, LONG_MS, err, sizeof err) != 0) {
            CHECK(0, "recv %d from seed %u: %s", i, seed, err);
            break;
        }
        CHECK(peer == from && m.step == step && m.run_id == mesh_run_id(RUN),
              "message %d: peer %d step %lld, want peer %d step %lld", i, peer,
              (long long)m.step, from, (long long)step);
        if (i < NBIG) {
            fill(want, BIG, seed + (uint32_t)i);
            CHECK(m.type == MESH_MSG_ACTIVATIONS && m.nbytes == BIG &&
                      memcmp(m.data, want, BIG) == 0,
                  "big tensor %d differs", i);
            int32_t lab[5];
            CHECK(m.nlabels == 5, "labels: %zu", m.nlabels);
            if (m.nlabels == 5) {
                memcpy(lab, m.labels, sizeof lab);
                CHECK(lab[1] == -100 && lab[4] == (int32_t)seed, "labels differ");
            }
        } else if (i < NBIG + NSMALL) {
            int k = i - NBIG;
            if (k % 2) {
                CHECK(m.type == MESH_MSG_NORM && m.value == k * 0.25 && m.flags == 1,
                      "norm %d", k);
            } else {
                float g[3];
                CHECK(m.type == MESH_MSG_GRADIENTS && m.nbytes == sizeof g, "grad %d", k);
                if (m.nbytes == sizeof g) {
                    memcpy(g, m.data, sizeof g);
                    CHECK(g[0] == (float)k && g[2] == (float)seed, "grad %d data", k);
                }
            }
        } else {
            CHECK(m.type == MESH_MSG_COMMIT && m.value == 2.5, "commit");
        }
        mesh_frame_free(f);
    }
    free(want);
}

static void test_exchange(void)
{
    mesh_net *a, *b;
    int ab, ba;
    pair(&a, &b, &ab, &ba, 0, 0);
    CHECK(strcmp(mesh_net_peer_name(a, ab), "b") == 0 &&
              strcmp(mesh_net_peer_name(b, ba), "a") == 0,
          "peer names");
    CHECK(mesh_net_peer_name(a, 5) == NULL, "peer name of a bad index");
    /* Both directions at once, from their own threads, while this thread
     * receives: a node sends and receives at the same time in a pipeline. */
    struct sender to_a = {.n = b, .peer = ba, .seed = 11}, to_b = {.n = a, .peer = ab, .seed = 22};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, send_stream, &to_a);
    pthread_create(&t2, NULL, send_stream, &to_b);
    receive_stream(a, ab, 11);
    receive_stream(b, ba, 22);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    CHECK(to_a.rc == 0, "b sending: %s", to_a.err);
    CHECK(to_b.rc == 0, "a sending: %s", to_b.err);

    /* The API refuses what it must. */
    char err[512] = "";
    mesh_msg h;
    memset(&h, 0, sizeof h);
    h.type = MESH_MSG_HELLO;
    CHECK(mesh_net_send(a, ab, &h, err, sizeof err) != 0 && strstr(err, "HELLO"),
          "user HELLO: %s", err);
    mesh_msg m = norm_msg(1, 1);
    CHECK(mesh_net_send(a, 7, &m, err, sizeof err) != 0 && strstr(err, "7"), "bad index: %s",
          err);
    CHECK(mesh_net_add_peer(a, "b", NULL, 0, err, sizeof err) < 0 && strstr(err, "twice"),
          "declared twice: %s", err);
    CHECK(mesh_net_add_peer(a, "a", NULL, 0, err, sizeof err) < 0 && strstr(err, "own"),
          "own name: %s", err);
    mesh_net_stop(b);
    mesh_net_stop(a);
    mesh_net_stop(NULL);
}

/* --------------------------------------------------------------- zero copy */

static void test_zero_copy(void)
{
    /* The receiver's bound is 1 MB: after a 2 MB frame it stops reading, so
     * what follows stays in the sender's memory, referenced, not copied. A
     * tensor larger than anything the two kernels can buffer has a tail that
     * cannot have left yet; changing it before flush (which the API forbids,
     * and this test does only to look) shows up at the receiver. */
    size_t kb = kernel_buffers();
    size_t big = 64 * MB;
    if (big < kb + 32 * MB)
        big = (kb + 32 * MB + MB - 1) / MB * MB;
    if (big > 512 * MB) {
        printf("skip the zero-copy tail check: kernel buffers of %zu bytes\n", kb);
        big = 0;
    }
    bool change_tail = !UNDER_TSAN;
    if (!change_tail)
        printf("skip changing the tail under ThreadSanitizer\n");
    mesh_net *a, *b;
    int ab, ba;
    pair(&a, &b, &ab, &ba, MB, MB);
    char err[512] = "";
    size_t first_n = 2 * MB;
    uint8_t *first = malloc(first_n);
    fill(first, first_n, 1);
    mesh_msg m = tensor_msg(MESH_MSG_GRADIENTS, 0, first, first_n);
    CHECK(mesh_net_send(b, ba, &m, err, sizeof err) == 0, "send first: %s", err);
    uint8_t *t = NULL;
    size_t tail = 8 * MB;
    if (big) {
        t = malloc(big);
        memset(t, 0x11, big);
        m = tensor_msg(MESH_MSG_GRADIENTS, 1, t, big);
        CHECK(mesh_net_send(b, ba, &m, err, sizeof err) == 0, "send big: %s", err);
        /* The receiver is not reading: flush cannot finish. */
        CHECK(mesh_net_flush(b, ba, 300, err, sizeof err) != 0 && strstr(err, "still queued"),
              "flush finished while the receiver was paused: %s", err);
        if (change_tail)
            memset(t + big - tail, 0xEE, tail);
    }
    int peer;
    mesh_frame *f;
    CHECK(mesh_net_recv(a, &peer, &m, &f, LONG_MS, err, sizeof err) == 0, "recv first: %s", err);
    CHECK(m.nbytes == first_n && memcmp(m.data, first, first_n) == 0, "first tensor differs");
    mesh_frame_free(f);
    if (big) {
        CHECK(mesh_net_recv(a, &peer, &m, &f, LONG_MS, err, sizeof err) == 0, "recv big: %s", err);
        CHECK(m.nbytes == big, "big: %zu bytes", m.nbytes);
        if (m.nbytes == big) {
            const uint8_t *d = m.data;
            CHECK(d[0] == 0x11 && d[big - tail - 1] == 0x11, "head of the big tensor changed");
            size_t seen = 0;
            for (size_t i = big - tail; i < big; i++)
                seen += d[i] == 0xEE;
            CHECK(seen == (change_tail ? tail : 0),
                  "the tail changed after send is not what arrived (%zu of %zu bytes): the "
                  "tensor was copied",
                  seen, tail);
        }
        mesh_frame_free(f);
    }
    CHECK(mesh_net_flush(b, ba, LONG_MS, err, sizeof err) == 0, "flush: %s", err);

    /* The use the API allows: change the buffer after flush only. */
    memset(first, 0x5A, first_n);
    m = tensor_msg(MESH_MSG_GRADIENTS, 2, first, first_n);
    CHECK(mesh_net_send(b, ba, &m, err, sizeof err) == 0, "send: %s", err);
    CHECK(mesh_net_flush(b, ba, LONG_MS, err, sizeof err) == 0, "flush: %s", err);
    memset(first, 0x00, first_n);
    CHECK(mesh_net_recv(a, &peer, &m, &f, LONG_MS, err, sizeof err) == 0, "recv: %s", err);
    const uint8_t *d = m.data;
    CHECK(m.nbytes == first_n && d[0] == 0x5A && d[first_n - 1] == 0x5A,
          "changing the buffer after flush changed what was sent");
    mesh_frame_free(f);
    free(first);
    free(t);
    mesh_net_stop(b);
    mesh_net_stop(a);
}

/* ------------------------------------------------------------ backpressure */

#define BP_COUNT 128

struct bp_sender {
    mesh_net *n;
    int peer;
    const uint8_t *buf;
    atomic_int sent;
    int rc;
    char err[512];
};

static void *bp_send(void *arg)
{
    struct bp_sender *s = arg;
    for (int i = 0; i < BP_COUNT; i++) {
        mesh_msg m = tensor_msg(MESH_MSG_GRADIENTS, i, s->buf, MB);
        if ((s->rc = mesh_net_send(s->n, s->peer, &m, s->err, sizeof s->err)) != 0)
            return NULL;
        atomic_store(&s->sent, i + 1);
    }
    s->rc = mesh_net_flush(s->n, s->peer, LONG_MS, s->err, sizeof s->err);
    return NULL;
}

static void test_backpressure(void)
{
    mesh_net *a, *b;
    int ab, ba;
    pair(&a, &b, &ab, &ba, MB, MB);
    uint8_t *buf = malloc(MB);
    fill(buf, MB, 7);
    struct bp_sender s = {.n = b, .peer = ba, .buf = buf};
    pthread_t t;
    pthread_create(&t, NULL, bp_send, &s);
    /* Nobody receives on a: wait until the sender has made no progress for
     * a second (it is blocked), or has finished (a failure). */
    int last = -1;
    double since = now_s(), t0 = now_s();
    while (now_s() - t0 < 60) {
        int k = atomic_load(&s.sent);
        if (k != last) {
            last = k;
            since = now_s();
        } else if (now_s() - since > 1.0 || k == BP_COUNT) {
            break;
        }
        sleep_ms(50);
    }
    int stalled = atomic_load(&s.sent);
    /* What a stalled sender can have handed over: its own queue (high water
     * plus one message), the kernels' buffers, the receiver's queue (its
     * bound plus one frame) and a few reads in flight. Without backpressure
     * on either end all 128 MB would be gone. */
    size_t bound = 2 * MB + kernel_buffers() + 2 * MB + 8 * MB;
    CHECK(stalled < BP_COUNT, "the sender never blocked: %d of %d sent", stalled, BP_COUNT);
    CHECK((size_t)stalled * MB <= bound, "%d MB left the sender, bound %zu MB", stalled,
          bound / MB);
    printf("backpressure: the sender stalled after %d of %d MB\n", stalled, BP_COUNT);
    char err[512] = "";
    for (int i = 0; i < BP_COUNT; i++) {
        int peer;
        mesh_msg m;
        mesh_frame *f;
        if (mesh_net_recv(a, &peer, &m, &f, LONG_MS, err, sizeof err) != 0) {
            CHECK(0, "recv %d: %s", i, err);
            break;
        }
        CHECK(m.step == i && m.nbytes == MB && memcmp(m.data, buf, MB) == 0, "message %d", i);
        mesh_frame_free(f);
    }
    pthread_join(t, NULL);
    CHECK(s.rc == 0 && atomic_load(&s.sent) == BP_COUNT, "sender: %s", s.err);
    free(buf);
    mesh_net_stop(b);
    mesh_net_stop(a);
}

/* ----------------------------------------------------------- connect retry */


static void test_connect_retry(void)
{
    int port = free_port();
    mesh_net *b = start("b", false, 0, 0, LONG_MS);
    int ba = add_peer(b, "a", "127.0.0.1", port);
    sleep_ms(300); /* b's first attempts are refused */
    mesh_net *a = start("a", true, port, 0, LONG_MS);
    int ab = add_peer(a, "b", NULL, 0);
    char err[512] = "";
    CHECK(mesh_net_wait_connected(b, LONG_MS, err, sizeof err) == 0, "b: %s", err);
    CHECK(mesh_net_wait_connected(a, LONG_MS, err, sizeof err) == 0, "a: %s", err);
    mesh_msg m = norm_msg(3, 9.0);
    CHECK(mesh_net_send(a, ab, &m, err, sizeof err) == 0, "send: %s", err);
    int peer;
    mesh_frame *f;
    CHECK(mesh_net_recv(b, &peer, &m, &f, LONG_MS, err, sizeof err) == 0 && peer == ba &&
              m.value == 9.0,
          "recv after retry: %s", err);
    mesh_frame_free(f);
    mesh_net_stop(a);
    mesh_net_stop(b);

    /* a listens but declares b only later: b's first HELLOs are refused as
     * undeclared and b tries again. What a sends b before b is there is
     * queued and delivered once it is. */
    a = start("a", true, 0, 0, LONG_MS);
    b = start("b", false, 0, 0, LONG_MS);
    ba = add_peer(b, "a", "127.0.0.1", mesh_net_port(a));
    sleep_ms(300);
    ab = add_peer(a, "b", NULL, 0);
    m = norm_msg(4, 16.0);
    CHECK(mesh_net_send(a, ab, &m, err, sizeof err) == 0, "send before b connected: %s", err);
    CHECK(mesh_net_wait_connected(b, LONG_MS, err, sizeof err) == 0, "b, late: %s", err);
    CHECK(mesh_net_wait_connected(a, LONG_MS, err, sizeof err) == 0, "a, late: %s", err);
    CHECK(mesh_net_recv(b, &peer, &m, &f, LONG_MS, err, sizeof err) == 0 && peer == ba &&
              m.value == 16.0,
          "recv of what was sent before connecting: %s", err);
    mesh_frame_free(f);
    CHECK(mesh_net_flush(a, ab, LONG_MS, err, sizeof err) == 0, "flush: %s", err);
    mesh_net_stop(a);
    mesh_net_stop(b);

    /* Nobody ever listens: connecting gives up after timeout_ms, naming the
     * peer and its address. */
    port = free_port();
    b = start("b", false, 0, 0, 500);
    add_peer(b, "nobody", "127.0.0.1", port);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    double t0 = now_s();
    int rc = mesh_net_wait_connected(b, LONG_MS, err, sizeof err);
    double dt = now_s() - t0;
    CHECK(rc != 0 && strstr(err, "nobody") && strstr(err, addr) && dt < 5.5,
          "gave up after %.1f s: %s", dt, err);
    printf("gave up: %s\n", err);
    mesh_net_stop(b);
}

/* ---------------------------------------------------------------- timeouts */

static void test_timeouts(void)
{
    mesh_net *a, *b;
    int ab, ba;
    pair(&a, &b, &ab, &ba, 0, 0);
    (void)ba;
    char err[512] = "";
    int peer;
    mesh_msg m;
    mesh_frame *f = (mesh_frame *)&f;
    double t0 = now_s();
    int rc = mesh_net_recv(a, &peer, &m, &f, 300, err, sizeof err);
    double dt = now_s() - t0;
    CHECK(rc != 0 && f == NULL && dt >= 0.3 && dt < 5.3 && strstr(err, "300 ms") &&
              strstr(err, "from b (127.0.0.1:"),
          "recv timeout after %.2f s: %s", dt, err);
    printf("timeout: %s\n", err);
    CHECK(mesh_net_recv(a, &peer, &m, &f, 0, err, sizeof err) != 0, "recv without waiting");
    CHECK(mesh_net_flush(a, ab, 1000, err, sizeof err) == 0, "flush of nothing: %s", err);

    /* A peer expected to connect here that never does. */
    CHECK(mesh_net_add_peer(a, "ghost", NULL, 0, err, sizeof err) >= 0, "ghost: %s", err);
    t0 = now_s();
    rc = mesh_net_wait_connected(a, 300, err, sizeof err);
    dt = now_s() - t0;
    CHECK(rc != 0 && strstr(err, "ghost") && !strstr(err, " b ") && dt >= 0.3 && dt < 5.3,
          "wait_connected after %.2f s: %s", dt, err);
    printf("missing: %s\n", err);
    mesh_net_stop(b);
    mesh_net_stop(a);
}

/* --------------------------------------------------------------- dead peer */

static void test_peer_closes(void)
{
    mesh_net *a, *b;
    int ab, ba;
    pair(&a, &b, &ab, &ba, 0, 0);
    char err[512] = "";
    mesh_msg m = norm_msg(5, 1.5);
    CHECK(mesh_net_send(b, ba, &m, err, sizeof err) == 0, "send: %s", err);
    CHECK(mesh_net_flush(b, ba, LONG_MS, err, sizeof err) == 0, "flush: %s", err);
    mesh_net_stop(b);
    int peer;
    mesh_frame *f;
    /* What was sent before the close still arrives, first. */
    CHECK(mesh_net_recv(a, &peer, &m, &f, LONG_MS, err, sizeof err) == 0 && m.step == 5,
          "message before the close: %s", err);
    mesh_frame_free(f);
    double t0 = now_s();
    int rc = mesh_net_recv(a, &peer, &m, &f, LONG_MS, err, sizeof err);
    double dt = now_s() - t0;
    CHECK(rc != 0 && peer == ab && strstr(err, "peer b (127.0.0.1:") && strstr(err, "closed") &&
              dt < 5,
          "recv after the peer closed (%.1f s): %s", dt, err);
    printf("closed: %s\n", err);
    m = norm_msg(6, 1);
    CHECK(mesh_net_send(a, ab, &m, err, sizeof err) != 0 && strstr(err, "peer b"),
          "send to a closed peer: %s", err);
    /* Nothing was lost on the way: flush has nothing to report. */
    CHECK(mesh_net_flush(a, ab, LONG_MS, err, sizeof err) == 0, "flush to a closed peer: %s",
          err);
    CHECK(mesh_net_wait_connected(a, 100, err, sizeof err) != 0 && strstr(err, "peer b"),
          "wait_connected with a closed peer: %s", err);
    mesh_net_stop(a);

    /* A receiver that stops while a tensor larger than the kernels' buffers
     * is still on its way: the sender's flush reports the bytes lost, and
     * returns only once the tensor is no longer referenced. */
    pair(&a, &b, &ab, &ba, MB, MB);
    size_t big = kernel_buffers() + 32 * MB;
    uint8_t *t = calloc(1, big);
    m = tensor_msg(MESH_MSG_GRADIENTS, 0, t, 2 * MB); /* a stops reading after it */
    CHECK(mesh_net_send(b, ba, &m, err, sizeof err) == 0, "send: %s", err);
    m = tensor_msg(MESH_MSG_GRADIENTS, 1, t, big / 4 * 4);
    CHECK(mesh_net_send(b, ba, &m, err, sizeof err) == 0, "send: %s", err);
    CHECK(mesh_net_flush(b, ba, 300, err, sizeof err) != 0, "flush while a is not reading");
    mesh_net_stop(a);
    rc = mesh_net_flush(b, ba, LONG_MS, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "peer a (127.0.0.1:") && strstr(err, "were not sent"),
          "flush after the receiver stopped: %s", err);
    printf("lost: %s\n", err);
    free(t);
    mesh_net_stop(b);
}

/* Forked before any thread exists. The child is a node that says one thing
 * and then hangs until it is killed. */
static void test_sigkill(void)
{
    int pfd[2];
    if (pipe(pfd) != 0) {
        CHECK(0, "pipe: %s", strerror(errno));
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        alarm(120); /* never outlive a parent that died */
        mesh_net *c = start("child", true, 0, 0, LONG_MS);
        int cp = add_peer(c, "parent", NULL, 0);
        int port = mesh_net_port(c);
        if (write(pfd[1], &port, sizeof port) != sizeof port)
            _exit(2);
        char err[512];
        if (mesh_net_wait_connected(c, LONG_MS, err, sizeof err) != 0)
            _exit(3);
        mesh_msg m = norm_msg(42, 4.0);
        if (mesh_net_send(c, cp, &m, err, sizeof err) != 0 ||
            mesh_net_flush(c, cp, LONG_MS, err, sizeof err) != 0)
            _exit(4);
        for (;;)
            pause();
    }
    close(pfd[1]);
    int port = 0;
    CHECK(read(pfd[0], &port, sizeof port) == sizeof port, "child's port");
    close(pfd[0]);
    mesh_net *p = start("parent", false, 0, 0, LONG_MS);
    int pc = add_peer(p, "child", "127.0.0.1", port);
    char err[512] = "";
    CHECK(mesh_net_wait_connected(p, LONG_MS, err, sizeof err) == 0, "child: %s", err);
    int peer;
    mesh_msg m;
    mesh_frame *f;
    CHECK(mesh_net_recv(p, &peer, &m, &f, LONG_MS, err, sizeof err) == 0 && m.step == 42,
          "child's message: %s", err);
    mesh_frame_free(f);
    kill(pid, SIGKILL);
    double t0 = now_s();
    int rc = mesh_net_recv(p, &peer, &m, &f, LONG_MS, err, sizeof err);
    double dt = now_s() - t0;
    char addr[64];
    snprintf(addr, sizeof addr, "peer child (127.0.0.1:%d)", port);
    CHECK(rc != 0 && peer == pc && strstr(err, addr) && dt < 5,
          "recv after SIGKILL (%.1f s): %s", dt, err);
    printf("killed: %s\n", err);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child ended otherwise: %d",
          status);
    mesh_net_stop(p);
}

int main(int argc, char **argv)
{
    static const net_test tests[] = {
        {"sigkill", test_sigkill},
        {"exchange", test_exchange},
        {"zero_copy", test_zero_copy},
        {"backpressure", test_backpressure},
        {"connect_retry", test_connect_retry},
        {"timeouts", test_timeouts},
        {"peer_closes", test_peer_closes},
    };
    return run_net_tests(tests, sizeof tests / sizeof tests[0], argc, argv, "net");
}

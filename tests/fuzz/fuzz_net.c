/* fuzz_net.c — libFuzzer target for the transport's frame reader
 * (mesh/net_conn.c: conn_read, conn_frame_start, conn_frame, conn_hello):
 * the state machine that turns a TCP byte stream from a peer into frames —
 * length prefixes, partial reads, the HELLO that must come first and its
 * size limit, frames of another run or version, a second HELLO, probes
 * that are echoed.
 *
 * Each input is sent, as it is, over a real TCP connection to a real
 * mesh_net (listening on 127.0.0.1, started for the input, with one
 * declared incoming peer "p" in run "fuzz"), then the write side is shut:
 * the node reads everything and closes. The harness reads the node's
 * replies to the end (a HELLO back, probe echoes), takes every frame it
 * delivered (mesh_net_recv), and stops it. Beyond "no crash, no leak, no
 * hang": every frame delivered comes from peer "p", is a message of this
 * run and version, and never a HELLO. A fresh net per input keeps inputs
 * independent (a peer that failed stays failed for its run).
 *
 * The node logs each refused connection on stderr; run with
 * -close_fd_mask=2 to keep the output short (sanitizer reports still show). */
#include "fuzz_util.h"
#include "mesh.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#define T "fuzz_net"

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    fuzz_require(fd >= 0, T, "socket", NULL);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = connect(fd, (struct sockaddr *)&a, sizeof a);
    if (rc != 0 && errno == EINTR) {
        /* libFuzzer's timer (SIGALRM) interrupted it: the connection goes on */
        struct pollfd p = {fd, POLLOUT, 0};
        int e = 0;
        socklen_t el = sizeof e;
        while (poll(&p, 1, 5000) < 0 && errno == EINTR)
            ;
        rc = getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0 ? 0 : -1;
        errno = e;
    }
    fuzz_require(rc == 0, T, "connect", strerror(errno));
    return fd;
}

/* Takes every frame the node has delivered; returns how many. */
static int take_frames(mesh_net *n, int peer)
{
    uint64_t run_id = mesh_run_id("fuzz");
    char err[512];
    int count = 0;
    for (;;) {
        int from;
        mesh_msg m;
        mesh_frame *f = NULL;
        if (mesh_net_recv(n, &from, &m, &f, 0, err, sizeof err) != 0)
            return count;   /* nothing more, or the peer is gone */
        fuzz_require(from == peer, T, "a frame from an undeclared peer", NULL);
        fuzz_require(m.type != MESH_MSG_HELLO && m.run_id == run_id &&
                         m.version == MESH_PROTOCOL_VERSION,
                     T, "delivered a HELLO, or a frame of another run or version", NULL);
        mesh_frame_free(f);
        count++;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int once;
    if (!once) {
        signal(SIGPIPE, SIG_IGN);
        once = 1;
    }
    char err[512];
    mesh_net_config cfg = {.self = "s", .run = "fuzz", .listen_host = "127.0.0.1",
                           .timeout_ms = 5000, .max_frame = (size_t)1 << 20};
    mesh_net *n;
    fuzz_require(mesh_net_start(&n, &cfg, err, sizeof err) == 0, T, "start", err);
    int peer = mesh_net_add_peer(n, "p", NULL, 0, err, sizeof err);
    fuzz_require(peer >= 0, T, "add peer", err);
    int fd = dial(mesh_net_port(n));
    /* Write, read and take delivered frames at once: the node answers
     * (HELLO, probe echoes) while it reads and could block on a full socket,
     * and it stops reading while its receive queue is full. */
    size_t off = 0;
    bool shut = false;
    int idle_ms = 0;
    for (;;) {
        int got = take_frames(n, peer);
        struct pollfd p = {fd, POLLIN | (shut ? 0 : POLLOUT), 0};
        int k = poll(&p, 1, 10);
        idle_ms = k > 0 || got ? 0 : idle_ms + 10;
        fuzz_require(idle_ms < 5000, T, "the node neither reads nor closes (hang)", NULL);
        if (k <= 0)
            continue;
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            char buf[65536];
            ssize_t r = read(fd, buf, sizeof buf);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;   /* the node closed: it has read everything it will */
        }
        if (!shut && (p.revents & POLLOUT))
            fuzz_send_step(fd, data, size, &off, &shut);
    }
    /* Close with a reset: a normal close leaves this end in TIME_WAIT, and
     * thousands of inputs a second would use up the ephemeral ports. */
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
    take_frames(n, peer);
    mesh_net_stop(n);
    return 0;
}

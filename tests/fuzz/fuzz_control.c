/* fuzz_control.c — libFuzzer target for the control socket's protocol
 * (node/daemon/daemon_tcp.c, control_readable): what `shardnode status`, `leave`, `set`,
 * `invite` and `train --state` send a running node, one line of JSON on
 * STATE/control.sock (mode 0600, but any process of the node's user reaches
 * it).
 *
 * For each input a node is opened from a state directory made once by
 * state_create (as `shardnode init`), with its gossip state, pool and
 * control listener exactly as the daemon makes them, but no network (no
 * UDP, no WireGuard, no timers). The input is written to the socket as it
 * is, the write side shut, and the node's event loop run until it has
 * answered and closed. Beyond "no crash, no leak, no hang": the node answers
 * every complete line (ending in a newline, within the 64 KiB limit) with
 * one line of JSON. The state files are restored before each input (a
 * "leave" rewrites mesh.json). Run with -close_fd_mask=2: the node logs on
 * stderr. */
#include "fuzz_node.h"

#include <errno.h>
#include <event2/event.h>
#include <jansson.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#define T "fuzz_control"

static fuzz_state_dir state;

/* The node as daemon_run makes it, with its control listener but without
 * its sockets to the network. */
static daemon_t *open_node(void)
{
    char err[512];
    fuzz_state_restore(&state);
    daemon_t *d = fuzz_state_open_node(&state, T);
    d->base = event_base_new();
    fuzz_require(d->base && daemon_control_open(d, err, sizeof err) == 0, T, "control", err);
    return d;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int once;
    if (!once) {
        once = 1;
        fuzz_state_make(&state, T);
    }
    daemon_t *d = open_node();
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un un;
    memset(&un, 0, sizeof un);
    un.sun_family = AF_UNIX;
    snprintf(un.sun_path, sizeof un.sun_path, "%s", d->ctl_path);
    fuzz_require(fd >= 0 && connect(fd, (struct sockaddr *)&un, sizeof un) == 0, T, "connect",
                 d->ctl_path);
    char *reply = malloc(1 << 20);
    size_t off = 0, got = 0;
    bool shut = false, closed = false;
    for (int rounds = 0; !closed; rounds++) {
        fuzz_require(rounds < 200000, T, "the node neither answers nor closes (hang)", NULL);
        event_base_loop(d->base, EVLOOP_NONBLOCK);
        struct pollfd p = {fd, POLLIN | (shut ? 0 : POLLOUT), 0};
        if (poll(&p, 1, 1) <= 0)
            continue;
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t r = read(fd, reply + got, (1 << 20) - 1 - got);
            if (r < 0 && errno == EINTR)
                continue;   /* libFuzzer's timer (SIGALRM) */
            if (r <= 0)
                closed = true;
            else
                got += (size_t)r;
        }
        if (!shut && (p.revents & POLLOUT))
            fuzz_send_step(fd, data, size, &off, &shut);
    }
    close(fd);
    reply[got] = 0;
    const uint8_t *nl = memchr(data, '\n', size);
    if (nl && (size_t)(nl - data) < DAEMON_CONTROL_MAX && off == size) {
        fuzz_require(got > 0 && reply[got - 1] == '\n' && memchr(reply, '\n', got) == reply + got - 1,
                     T, "a request line got no one-line answer", NULL);
        json_t *j = json_loads(reply, 0, NULL);
        fuzz_require(json_is_object(j), T, "the answer is not a JSON object", reply);
        json_decref(j);
    }
    free(reply);
    daemon_free(d);
    return 0;
}

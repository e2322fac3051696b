/* fuzz_control.c — libFuzzer target for the control socket's protocol
 * (node/daemon_tcp.c, control_readable): what `shardnode status`, `leave`,
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
#include "daemon_internal.h"
#include "fuzz_util.h"
#include "node.h"

#include <errno.h>
#include <event2/event.h>
#include <jansson.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#define T "fuzz_control"

static char state[600], node_text[8192], mesh_text[8192];

static void read_all(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    fuzz_require(f != NULL, T, "cannot read", path);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
}

static void send_nothing(void *ctx, const char *addr, int port, const uint8_t *buf, size_t len)
{
    (void)ctx, (void)addr, (void)port, (void)buf, (void)len;
}

static void sync_nothing(void *ctx, const gossip_member *m) { (void)ctx, (void)m; }

/* The node as daemon_run makes it, without its sockets to the network. */
static daemon_t *open_node(void)
{
    char err[512], path[700];
    fuzz_write_file("state/node.json", node_text, strlen(node_text), path, sizeof path);
    fuzz_write_file("state/mesh.json", mesh_text, strlen(mesh_text), path, sizeof path);
    daemon_t *d;
    fuzz_require(daemon_open_state(&d, state, err, sizeof err) == 0, T, "open state", err);
    gossip_config gc;
    memset(&gc, 0, sizeof gc);
    gc.prefix = d->prefix;
    daemon_self_record(d, &gc.self);
    memcpy(gc.id_priv, d->id_priv, GOSSIP_KEY_LEN);
    memcpy(gc.wg_priv, d->wg_priv, GOSSIP_KEY_LEN);
    gc.self_adm = d->adm;
    gc.hooks = (gossip_hooks){.ctx = d, .send = send_nothing, .sync = sync_nothing};
    gc.seed = 1;
    fuzz_require(gossip_create(&d->g, &gc, daemon_now_ms(), err, sizeof err) == 0, T, "gossip",
                 err);
    d->adm = gossip_self(d->g)->sig.adm;
    fuzz_require(pool_open(d) == 0, T, "pool", NULL);
    d->base = event_base_new();
    fuzz_require(d->base && daemon_control_open(d, err, sizeof err) == 0, T, "control", err);
    return d;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int once;
    if (!once) {
        once = 1;
        char err[512], path[700], overlay[64], mesh_hex[33];
        snprintf(state, sizeof state, "%s/state", fuzz_dir());
        fuzz_require(state_create(state, "fuzz", 51820, "198.51.100.1:51820", "10.77.0.0/16",
                                  NULL, overlay, sizeof overlay, mesh_hex, err, sizeof err) == 0,
                     T, "state_create", err);
        snprintf(path, sizeof path, "%s/node.json", state);
        read_all(path, node_text, sizeof node_text);
        snprintf(path, sizeof path, "%s/mesh.json", state);
        read_all(path, mesh_text, sizeof mesh_text);
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
        if (!shut && (p.revents & POLLOUT)) {
            ssize_t w = off < size ? send(fd, data + off, size - off, MSG_NOSIGNAL) : 0;
            if (w < 0 && errno == EINTR)
                continue;
            if (w > 0)
                off += (size_t)w;
            if (w < 0 || off == size) {
                shutdown(fd, SHUT_WR);
                shut = true;
            }
        }
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

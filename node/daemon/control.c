/* control.c — the client of a running node's control socket
 * (STATE/control.sock, served by daemon_tcp.c): what the commands `invite`,
 * `status`, `leave`, `train --pool`, `demo` and the FETCH client use to talk
 * to the node (daemon.h). */
#include "daemon_internal.h"
#include "node_base.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* One request over DIR/control.sock; returns the reply (json_decref it) or
 * NULL with err. */
json_t *node_control_request(const char *state, const char *cmd, char *err, size_t errlen)
{
    json_t *req = json_pack("{s:s}", "cmd", cmd);
    json_t *r = node_control_call(state, req, err, errlen);
    json_decref(req);
    return r;
}

json_t *node_control_call(const char *state, json_t *request, char *err, size_t errlen)
{
    struct sockaddr_un un;
    memset(&un, 0, sizeof un);
    un.sun_family = AF_UNIX;
    int n = snprintf(un.sun_path, sizeof un.sun_path, "%s/control.sock", state);
    if (n < 0 || (size_t)n >= sizeof un.sun_path) {
        node_errf(err, errlen, "%s/control.sock: path too long for a Unix socket", state);
        return NULL;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&un, sizeof un) != 0) {
        node_errf(err, errlen, "no node is running on %s (%s: %s); start it with `shardnode up "
                  "--state %s`", state, un.sun_path, strerror(errno), state);
        if (fd >= 0) close(fd);
        return NULL;
    }
    char *req = json_dumps(request, JSON_COMPACT);
    size_t len = req ? strlen(req) : 0, off = 0;
    char *buf = NULL;
    json_t *j = NULL;
    if (!req || len + 1 > DAEMON_CONTROL_MAX) {
        free(req);
        node_errf(err, errlen, "the request to the node on %s is too large", state);
        close(fd);
        return NULL;
    }
    req[len] = 0;
    ssize_t sent = send(fd, req, len, MSG_NOSIGNAL);
    free(req);
    if (sent != (ssize_t)len || send(fd, "\n", 1, MSG_NOSIGNAL) != 1) goto io;
    size_t cap = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10000) != 1) goto io;
        if (off + 4096 > cap) {
            if (cap > ((size_t)16 << 20)) goto io;
            char *nb = realloc(buf, cap = cap * 2 + 8192);
            if (!nb) goto io;
            buf = nb;
        }
        ssize_t r = recv(fd, buf + off, cap - off - 1, 0);
        if (r < 0) goto io;
        if (r == 0) break;
        off += (size_t)r;
    }
    if (!buf) goto io;
    buf[off] = '\0';
    json_error_t je;
    j = json_loads(buf, 0, &je);
    if (!j) node_errf(err, errlen, "the node's reply is not JSON: %s", je.text);
    free(buf);
    close(fd);
    return j;
io:
    node_errf(err, errlen, "the node on %s did not answer", state);
    free(buf);
    close(fd);
    return NULL;
}

/* demo_ns.c — the network namespaces of `shardnode demo` (demo_cmd.c):
 * building the hub (a bridge) and one namespace per node behind a veth, and
 * taking them down again: the processes still running in them (found by
 * their /proc/PID/ns/net), the namespaces, and the UAPI sockets a killed
 * wireguard-go leaves in /var/run/wireguard (its interface names found in
 * the namespaces and in the nodes' state directories). Every command runs
 * through fork/execvp (`ip ...`), never a shell. */
#include "demo_internal.h"

#include "keys.h"
#include "node_base.h"

#include <jansson.h>

#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- namespaces ---------------------------------------------------------- */

void demo_add_iface(demo_t *d, const char *name)
{
    if (strlen(name) >= sizeof d->ifaces[0]) return;
    for (int i = 0; i < d->nifaces; i++)
        if (strcmp(d->ifaces[i], name) == 0) return;
    if (d->nifaces < DEMO_IFACES) snprintf(d->ifaces[d->nifaces++], sizeof d->ifaces[0], "%s", name);
}

/* The WireGuard interface a state directory's node uses (as daemon_state.c
 * names it: node.json "ifname", else "sn" + its public key's first bytes),
 * so the UAPI socket of a wireguard-go killed with SIGKILL (its interface
 * gone with it) can still be found. Best effort. */
static void note_state_iface(demo_t *d, const char *state)
{
    char path[DEMO_PATH + 16], err[256];
    snprintf(path, sizeof path, "%s/node.json", state);
    json_t *node = access(path, F_OK) == 0 ? node_load_json(path, err, sizeof err) : NULL;
    const char *ifname = node ? node_json_str(node, "ifname") : NULL;
    if (ifname && *ifname) {
        demo_add_iface(d, ifname);
    } else {
        uint8_t priv[KEYS_LEN], pub[KEYS_LEN];
        snprintf(path, sizeof path, "%s/wg.key", state);
        if (access(path, F_OK) == 0 && keys_file_read(path, priv, err, sizeof err) == 0 &&
            keys_x25519_public(priv, pub, err, sizeof err) == 0) {
            char hex[9], name[16];
            node_hex_encode(pub, 4, hex);
            snprintf(name, sizeof name, "sn%s", hex);
            demo_add_iface(d, name);
        }
        memset(priv, 0, sizeof priv);
    }
    json_decref(node);
}

/* Interface names in ns other than ours (lo, eth0, br0, the veths): the
 * wireguard-go interfaces, whose UAPI sockets a SIGKILL leaves behind. */
void demo_note_ifaces(demo_t *d, const char *ns)
{
    char *argv[] = {"ip", "-n", (char *)ns, "-o", "link", "show", NULL};
    char out[16384], err[256];
    if (demo_run_capture(argv, out, sizeof out, 10, err, sizeof err) != 0) return;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char *p = strchr(line, ':');
        if (!p) continue;
        p += strspn(p + 1, " ") + 1;
        size_t k = strcspn(p, ":@");
        if (k == 0 || k >= sizeof d->ifaces[0]) continue;
        char name[32];
        memcpy(name, p, k);
        name[k] = '\0';
        if (strcmp(name, "lo") == 0 || strcmp(name, "eth0") == 0 || strcmp(name, "br0") == 0 ||
            strncmp(name, "v-", 2) == 0)
            continue;
        demo_add_iface(d, name);
    }
}

/* Pids of the processes whose network namespace is ns (as `ip netns pids`). */
static int ns_pids(const char *ns, pid_t *pids, int max)
{
    char path[128];
    snprintf(path, sizeof path, "/run/netns/%s", ns);
    struct stat nst;
    if (stat(path, &nst) != 0) return 0;
    DIR *proc = opendir("/proc");
    if (!proc) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(proc)) != NULL && n < max) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid()) continue;
        char link[300];
        snprintf(link, sizeof link, "/proc/%ld/ns/net", pid);
        struct stat st;
        if (stat(link, &st) == 0 && st.st_ino == nst.st_ino && st.st_dev == nst.st_dev)
            pids[n++] = (pid_t)pid;
    }
    closedir(proc);
    return n;
}

/* Kills whatever runs in ns (SIGTERM, up to wait_s, then SIGKILL); returns
 * how many processes it found. */
static int ns_kill_all(const char *ns, double wait_s)
{
    pid_t pids[256];
    int n = ns_pids(ns, pids, 256), found = n;
    if (!n) return 0;
    for (int i = 0; i < n; i++) kill(pids[i], SIGTERM);
    double end = demo_now_s() + wait_s;
    while ((n = ns_pids(ns, pids, 256)) > 0 && demo_now_s() < end) {
        while (waitpid(-1, NULL, WNOHANG) > 0) {}
        demo_sleep_ms(100);
    }
    for (int i = 0; i < n; i++) kill(pids[i], SIGKILL);
    for (int i = 0; i < 20 && ns_pids(ns, pids, 256) > 0; i++) {
        while (waitpid(-1, NULL, WNOHANG) > 0) {}
        demo_sleep_ms(100);
    }
    return found;
}

bool demo_ns_exists(const char *ns)
{
    char path[128];
    snprintf(path, sizeof path, "/run/netns/%s", ns);
    return access(path, F_OK) == 0;
}

/* A live UAPI socket answers connect(); a stale one (its wireguard-go
 * killed) refuses. */
static bool socket_live(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) return true;
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof a.sun_path) {
        close(fd);
        return true;
    }
    memcpy(a.sun_path, path, strlen(path) + 1);
    bool live = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return live;
}

/* Deletes the demo's namespaces (and kills what runs there); prints what it
 * did when loud. Returns the number of problems. */
int demo_ns_destroy(demo_t *d, bool loud)
{
    const char *all[DEMO_NODES + 1] = {demo_ns[0], demo_ns[1], demo_ns[2], demo_ns_hub};
    int problems = 0, killed = 0, deleted = 0;
    for (int i = 0; i < DEMO_NODES; i++) note_state_iface(d, d->state[i]);
    for (int i = 0; i <= DEMO_NODES; i++)
        if (demo_ns_exists(all[i])) demo_note_ifaces(d, all[i]);
    for (int i = 0; i <= DEMO_NODES; i++)
        if (demo_ns_exists(all[i])) killed += ns_kill_all(all[i], 5);
    for (int i = 0; i <= DEMO_NODES; i++) {
        if (!demo_ns_exists(all[i])) continue;
        pid_t left[4];
        int n = ns_pids(all[i], left, 4);
        if (n) {
            fprintf(stderr, "shardnode demo: namespace %s: %d process(es) survive SIGKILL "
                            "(pid %ld...)\n", all[i], n, (long)left[0]);
            problems++;
        }
        char *argv[] = {"ip", "netns", "del", (char *)all[i], NULL};
        char err[600];
        if (demo_run_ok(argv, 30, err, sizeof err) != 0) {
            fprintf(stderr, "shardnode demo: %s\n", err);
            problems++;
        } else {
            deleted++;
        }
    }
    int sockets = 0;
    for (int i = 0; i < d->nifaces; i++) {
        char path[128];
        snprintf(path, sizeof path, "/var/run/wireguard/%s.sock", d->ifaces[i]);
        if (access(path, F_OK) == 0 && !socket_live(path) && unlink(path) == 0) sockets++;
    }
    if (loud || killed || deleted || sockets)
        printf("%s%d namespace(s) deleted, %d leftover process(es) killed in them, "
               "%d stale wireguard socket(s) removed\n", loud ? "cleanup: " : "leftovers: ",
               deleted, killed, sockets);
    d->nifaces = 0;
    return problems;
}

static int ip_run(char *err, size_t errlen, ...)
{
    char *argv[24];
    int n = 0;
    argv[n++] = "ip";
    va_list ap;
    va_start(ap, errlen);
    char *a;
    while ((a = va_arg(ap, char *)) != NULL && n < 23) argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    return demo_run_ok(argv, 30, err, errlen);
}

int demo_ns_build(demo_t *d, char *err, size_t errlen)
{
    char *hub = (char *)demo_ns_hub;
    d->ns_made = true;
    if (ip_run(err, errlen, "netns", "add", hub, NULL) ||
        ip_run(err, errlen, "-n", hub, "link", "set", "lo", "up", NULL) ||
        ip_run(err, errlen, "-n", hub, "link", "add", "br0", "type", "bridge", NULL) ||
        ip_run(err, errlen, "-n", hub, "link", "set", "br0", "up", NULL))
        return -1;
    for (int i = 0; i < DEMO_NODES; i++) {
        char *ns = (char *)demo_ns[i], veth[16], addr[32];
        snprintf(veth, sizeof veth, "v-%s", demo_names[i]);
        snprintf(addr, sizeof addr, "%s/24", demo_ip[i]);
        if (ip_run(err, errlen, "netns", "add", ns, NULL) ||
            ip_run(err, errlen, "-n", ns, "link", "set", "lo", "up", NULL) ||
            ip_run(err, errlen, "-n", hub, "link", "add", veth, "type", "veth", "peer", "name",
                   "eth0", "netns", ns, NULL) ||
            ip_run(err, errlen, "-n", hub, "link", "set", veth, "master", "br0", "up", NULL) ||
            ip_run(err, errlen, "-n", ns, "addr", "add", addr, "dev", "eth0", NULL) ||
            ip_run(err, errlen, "-n", ns, "link", "set", "eth0", "up", NULL))
            return -1;
    }
    return 0;
}

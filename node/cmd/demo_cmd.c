/* demo_cmd.c — `shardnode demo`: a pool of three nodes on this machine, each
 * in its own network namespace behind wireguard-go, joined by invite tokens;
 * it trains a job (the KJV one by default) across them, shows the plan,
 * progress and loss, and ends with a sample from the gathered model (a LoRA
 * job: its base with the gathered adapter; --prompt TEXT sets the prompt).
 *
 * Every command runs through fork/execvp (`ip netns exec NS ...`), never a
 * shell. Whatever the demo started is taken down on the way out: on success,
 * on any failure and on SIGINT/SIGTERM/SIGHUP (the handlers only set a flag;
 * every wait below polls it).
 *
 * Namespaces and WireGuard need root, /dev/net/tun, wireguard-go and ip.
 * Without any of them the nodes run as plain processes on loopback
 * addresses of the host namespace with the overlay disabled, and every
 * line says INSECURE (nothing is encrypted there).
 *
 * The network namespaces (building them, and taking them down with
 * whatever was left in them) are demo_ns.c's; demo_internal.h is what the
 * two files share. */
#define _DEFAULT_SOURCE /* realpath */
#include "commands.h"
#include "daemon.h"
#include "demo_internal.h"
#include "keys.h"
#include "node_base.h"
#include "runtime.h"

#include <jansson.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
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
#include <dirent.h>
#include <time.h>
#include <unistd.h>

const char *const demo_ns_hub = "sndemo-hub";
const char *const demo_names[DEMO_NODES] = {"a", "b", "c"};
const char *const demo_ns[DEMO_NODES] = {"sndemo-a", "sndemo-b", "sndemo-c"};
const char *const demo_ip[DEMO_NODES] = {"10.210.0.11", "10.210.0.12", "10.210.0.13"};
#define DEMO_PORT "51820"
#define DEMO_PREFIX "10.79.0.0/16"
/* Without root: the nodes are plain processes, their mesh prefix inside
 * 127.0.0.0/8, which the daemon takes as "no overlay": no WireGuard, no
 * encryption, every log line marked INSECURE. */
#define DEMO_LOOPBACK_PREFIX "127.0.0.0/8"
static const char *const demo_lo_endpoint[DEMO_NODES] = {"127.0.0.1:51820", "127.0.0.1:51821",
                                                       "127.0.0.1:51822"};
static bool demo_loopback;
static const char *demo_prompt = "And God said";   /* --prompt: the closing sample's */

static volatile sig_atomic_t demo_signal;

static void demo_on_signal(int sig)
{
    demo_signal = sig;
}

void demo_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

double demo_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- child processes ---------------------------------------------------- */

/* Forks and execs argv. out_fd / err_fd: where stdout / stderr go (-1:
 * inherit; -2 for stderr: same as stdout). new_group: setsid, so a terminal's
 * ^C reaches only the demo. stdin is /dev/null. Returns the pid or -1. */
static pid_t spawn(char *const argv[], int out_fd, int err_fd, bool new_group, char *err,
                   size_t errlen)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return node_errf(err, errlen, "%s: fork: %s", argv[0], strerror(errno));
    if (pid == 0) {
        if (new_group) setsid();
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0) {
            dup2(null, 0);
            if (null > 2) close(null);
        }
        if (out_fd >= 0) dup2(out_fd, 1);
        if (err_fd == -2) dup2(1, 2);
        else if (err_fd >= 0) dup2(err_fd, 2);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        execvp(argv[0], argv);
        fprintf(stderr, "shardnode demo: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

/* Waits for pid up to timeout_s (0: no limit); on timeout or a signal to the
 * demo, SIGTERMs it (then SIGKILLs) and fails. Returns the exit code (128 + n
 * for signal n) or -1 with err. */
static int wait_child(pid_t pid, const char *what, double timeout_s, char *err, size_t errlen)
{
    double end = demo_now_s() + timeout_s;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0 && errno != EINTR)
            return node_errf(err, errlen, "%s: waitpid: %s", what, strerror(errno));
        bool stop = demo_signal != 0, late = timeout_s > 0 && demo_now_s() > end;
        if (stop || late) {
            kill(pid, SIGTERM);
            for (int i = 0; i < 50 && waitpid(pid, &st, WNOHANG) == 0; i++) demo_sleep_ms(100);
            if (waitpid(pid, &st, WNOHANG) == 0) {
                kill(pid, SIGKILL);
                waitpid(pid, &st, 0);
            }
            if (stop) return node_errf(err, errlen, "%s: interrupted (signal %d)", what,
                                       (int)demo_signal);
            return node_errf(err, errlen, "%s: still running after %.0f s", what, timeout_s);
        }
        demo_sleep_ms(50);
    }
}

/* Runs argv to the end with output to the terminal (or to out_fd). Returns
 * its exit code, or -1 with err when it could not run or was cut short. */
static int run_cmd(char *const argv[], int out_fd, double timeout_s, char *err, size_t errlen)
{
    pid_t pid = spawn(argv, out_fd, out_fd >= 0 ? -2 : -1, false, err, errlen);
    if (pid < 0) return -1;
    return wait_child(pid, argv[0], timeout_s, err, errlen);
}

/* Runs argv with ok==0 required; err names the command. */
int demo_run_ok(char *const argv[], double timeout_s, char *err, size_t errlen)
{
    char why[512];
    int rc = run_cmd(argv, -1, timeout_s, why, sizeof why);
    if (rc == 0) return 0;
    char cmd[512];
    int off = 0;
    for (int i = 0; argv[i] && off < (int)sizeof cmd - 2; i++)
        off += snprintf(cmd + off, sizeof cmd - (size_t)off, "%s%s", i ? " " : "", argv[i]);
    if (rc < 0) return node_errf(err, errlen, "%s: %s", cmd, why);
    return node_errf(err, errlen, "%s: exited %d", cmd, rc);
}

/* Runs argv and collects its stdout (NUL-terminated, truncated to len);
 * stderr goes to the terminal. Returns the exit code or -1. */
int demo_run_capture(char *const argv[], char *out, size_t len, double timeout_s, char *err,
                     size_t errlen)
{
    int fd[2];
    if (pipe(fd) != 0) return node_errf(err, errlen, "%s: pipe: %s", argv[0], strerror(errno));
    pid_t pid = spawn(argv, fd[1], -1, false, err, errlen);
    close(fd[1]);
    if (pid < 0) {
        close(fd[0]);
        return -1;
    }
    size_t got = 0;
    double end = demo_now_s() + timeout_s;
    for (;;) {
        struct pollfd p = {fd[0], POLLIN, 0};
        int n = poll(&p, 1, 100);
        if (n > 0) {
            char buf[4096];
            ssize_t r = read(fd[0], buf, sizeof buf);
            if (r == 0) break;
            if (r < 0 && errno != EINTR) break;
            if (r > 0 && got + 1 < len) {
                size_t take = (size_t)r < len - 1 - got ? (size_t)r : len - 1 - got;
                memcpy(out + got, buf, take);
                got += take;
            }
        }
        if (demo_signal || demo_now_s() > end) break;
    }
    close(fd[0]);
    if (len) out[got] = '\0';
    return wait_child(pid, argv[0], timeout_s > 0 ? end - demo_now_s() + 1 : 0, err, errlen);
}

/* ---- files -------------------------------------------------------------- */

static int remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) return unlink(path);
    DIR *d = opendir(path);
    if (!d) return -1;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char sub[DEMO_PATH];
        if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) >= (int)sizeof sub) {
            rc = -1;
            continue;
        }
        if (remove_tree(sub) != 0) rc = -1;
    }
    closedir(d);
    return rmdir(path) == 0 ? rc : -1;
}

static int make_dirs(const char *path, char *err, size_t errlen)
{
    char p[DEMO_PATH];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p)
        return node_errf(err, errlen, "%.200s...: path too long", path);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                return node_errf(err, errlen, "%s: cannot create: %s", p, strerror(errno));
            *s = c;
            if (!c) break;
        }
    }
    return 0;
}

/* The last n lines of a file, indented, on stderr. */
static void print_tail(const char *path, int n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "---- %s: %s\n", path, strerror(errno));
        return;
    }
    static char buf[65536];
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    long from = size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0;
    fseek(f, from, SEEK_SET);
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = '\0';
    size_t start = got;
    int lines = 0;
    if (start > 0 && buf[start - 1] == '\n') start--;
    while (start > 0) {
        if (buf[start - 1] == '\n' && ++lines == n) break;
        start--;
    }
    fprintf(stderr, "---- %s (last %d lines)\n%s%s", path, n, buf + start,
            got && buf[got - 1] != '\n' ? "\n" : "");
}

/* ---- the nodes ------------------------------------------------------------ */

static int node_start(demo_t *d, int i, char *const args[], char *err, size_t errlen)
{
    char *argv[32];
    int n = 0;
    if (!demo_loopback) {
        argv[n++] = "ip";
        argv[n++] = "netns";
        argv[n++] = "exec";
        argv[n++] = (char *)demo_ns[i];
    }
    argv[n++] = d->exe;
    for (int k = 0; args[k] && n < 31; k++) argv[n++] = args[k];
    argv[n] = NULL;
    int fd = open(d->log[i], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return node_errf(err, errlen, "%s: cannot open: %s", d->log[i], strerror(errno));
    pid_t pid = spawn(argv, fd, -2, true, err, errlen);
    close(fd);
    if (pid < 0) return -1;
    d->node[i] = pid;
    d->node_reaped[i] = false;
    return 0;
}

/* Fails when a node process has exited. */
static int nodes_check(demo_t *d, char *err, size_t errlen)
{
    for (int i = 0; i < DEMO_NODES; i++) {
        if (!d->node[i] || d->node_reaped[i]) continue;
        int st;
        if (waitpid(d->node[i], &st, WNOHANG) == d->node[i]) {
            d->node_reaped[i] = true;
            d->node_status[i] = st;
            return node_errf(err, errlen, "node %s exited (%s %d); see %s", demo_names[i],
                             WIFEXITED(st) ? "status" : "signal",
                             WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), d->log[i]);
        }
    }
    if (demo_signal) return node_errf(err, errlen, "interrupted (signal %d)", (int)demo_signal);
    return 0;
}

static int alive_members(json_t *st)
{
    int n = 0;
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(st, "members"), i, m) {
        const char *s = node_json_str(m, "state");
        if (s && strcmp(s, "alive") == 0) n++;
    }
    return n;
}

/* Polls the control socket of node i (it works across namespaces) until
 * want members are alive (want 0: until it answers at all). */
static int wait_status(demo_t *d, int i, int want, double timeout_s, char *err, size_t errlen)
{
    double end = demo_now_s() + timeout_s;
    char why[1024] = "";
    int alive = 0;
    while (demo_now_s() < end) {
        if (nodes_check(d, err, errlen) != 0) return -1;
        json_t *st = node_control_request(d->state[i], "status", why, sizeof why);
        if (st) {
            alive = alive_members(st);
            const char *ifname = node_json_str(st, "interface");
            if (ifname) demo_add_iface(d, ifname);
            json_decref(st);
            if (alive >= want) return 0;
        }
        demo_sleep_ms(500);
    }
    if (want == 0)
        return node_errf(err, errlen, "node %s: no answer on %s/control.sock after %.0f s (%s)",
                         demo_names[i], d->state[i], timeout_s, why);
    return node_errf(err, errlen, "node %s sees %d of %d members alive after %.0f s",
                     demo_names[i], alive, want, timeout_s);
}

/* Stops the nodes: SIGTERM to each process group, up to 10 s, SIGKILL. */
static int nodes_stop(demo_t *d)
{
    int stopped = 0;
    for (int i = 0; i < DEMO_NODES; i++)
        if (d->node[i]) kill(-d->node[i], SIGTERM);
    double end = demo_now_s() + 10;
    for (;;) {
        bool any = false;
        for (int i = 0; i < DEMO_NODES; i++) {
            if (!d->node[i]) continue;
            int st;
            if (!d->node_reaped[i] && waitpid(d->node[i], &st, WNOHANG) == d->node[i]) {
                d->node_reaped[i] = true;
                d->node_status[i] = st;
            }
            /* the group may still hold wireguard-go after the node itself */
            if (!d->node_reaped[i] || kill(-d->node[i], 0) == 0) any = true;
        }
        if (!any || demo_now_s() > end) break;
        demo_sleep_ms(100);
    }
    for (int i = 0; i < DEMO_NODES; i++) {
        if (!d->node[i]) continue;
        if (!d->node_reaped[i] || kill(-d->node[i], 0) == 0) {
            fprintf(stderr, "shardnode demo: node %s did not stop in 10 s: SIGKILL\n",
                    demo_names[i]);
            kill(-d->node[i], SIGKILL);
            if (!d->node_reaped[i]) waitpid(d->node[i], NULL, 0);
        }
        d->node[i] = 0;
        stopped++;
    }
    return stopped;
}

static void cleanup(demo_t *d, bool keep)
{
    int problems = 0;
    /* a second ^C during cleanup must not cut it short */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    sig_atomic_t was = demo_signal;
    demo_signal = 0;
    printf("== cleanup\n");
    for (int i = 0; i < DEMO_NODES; i++)
        if (demo_ns_exists(demo_ns[i])) demo_note_ifaces(d, demo_ns[i]);
    int stopped = nodes_stop(d);
    printf("cleanup: %d node process group(s) stopped\n", stopped);
    if (d->ns_made) problems += demo_ns_destroy(d, true);
    if (!keep) {
        int removed = 0;
        for (int i = 0; i < DEMO_NODES; i++) {
            if (access(d->state[i], F_OK) == 0) {
                if (remove_tree(d->state[i]) != 0) {
                    fprintf(stderr, "shardnode demo: cannot remove %s: %s\n", d->state[i],
                            strerror(errno));
                    problems++;
                } else {
                    removed++;
                }
            }
            unlink(d->log[i]);
        }
        rmdir(d->dir);   /* only if nothing else is in it */
        printf("cleanup: %d state dir(s) and their logs removed from %s\n", removed, d->dir);
    } else {
        printf("cleanup: state dirs and logs kept in %s (--keep)\n", d->dir);
    }
    if (problems) printf("cleanup: %d problem(s), see above\n", problems);
    fflush(stdout);
    demo_signal = was;
}

static void print_logs(demo_t *d)
{
    for (int i = 0; i < DEMO_NODES; i++) {
        char path[DEMO_PATH + 16];
        print_tail(d->log[i], 20);
        snprintf(path, sizeof path, "%s/node.log", d->state[i]);
        if (access(path, F_OK) == 0) print_tail(path, 20);
    }
}

/* ---- preconditions and inputs ---------------------------------------------- */

static bool on_path(const char *name)
{
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    while (*path) {
        size_t k = strcspn(path, ":");
        char full[DEMO_PATH];
        if (k && snprintf(full, sizeof full, "%.*s/%s", (int)k, path, name) < (int)sizeof full &&
            access(full, X_OK) == 0)
            return true;
        path += k;
        if (*path == ':') path++;
    }
    return false;
}

/* Makes the KJV corpus and tokenizer as scripts/quickstart.sh does. */
static int make_kjv(demo_t *d, const job_spec *job, char *err, size_t errlen)
{
    const char *data = job->data_files[0];
    if (access(data, F_OK) != 0) {
        if (!on_path("bible"))
            return node_errf(err, errlen, "%s is missing and the `bible` command that makes it "
                             "is not installed (apt-get install bible-kjv)", data);
        char dir[DEMO_PATH], tmp[DEMO_PATH + 8];
        snprintf(dir, sizeof dir, "%s", data);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
            *slash = '\0';
            if (make_dirs(dir, err, errlen) != 0) return -1;
        }
        snprintf(tmp, sizeof tmp, "%s.part", data);
        printf("== corpus: the King James Bible (Debian package bible-kjv) into %s\n", data);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) return node_errf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        char *argv[] = {"bible", "Gen1:1-Rev22:21", NULL};
        char why[512];
        pid_t pid = spawn(argv, fd, -1, false, why, sizeof why);
        close(fd);
        int rc = pid < 0 ? -1 : wait_child(pid, "bible", 600, why, sizeof why);
        if (rc != 0) {
            unlink(tmp);
            if (rc > 0) snprintf(why, sizeof why, "exited %d", rc);
            return node_errf(err, errlen, "bible 'Gen1:1-Rev22:21' > %s: %s", data, why);
        }
        if (rename(tmp, data) != 0) {
            unlink(tmp);
            return node_errf(err, errlen, "%s: cannot rename to %s: %s", tmp, data,
                             strerror(errno));
        }
    }
    if (access(job->tokenizer, F_OK) != 0) {
        printf("== tokenizer: byte-level BPE, 2048 tokens, into %s\n", job->tokenizer);
        char *argv[] = {d->exe, "tokenizer", "train", "--input", (char *)data, "--vocab-size",
                        "2048", "--out", job->tokenizer, NULL};
        if (demo_run_ok(argv, 0, err, errlen) != 0) return -1;
    }
    return 0;
}

static int check_inputs(demo_t *d, const char *job_path, bool is_default, char *err,
                        size_t errlen)
{
    job_spec job;
    if (job_load(&job, job_path, err, errlen) != 0) return -1;
    const char *missing = NULL;
    if (access(job.tokenizer, R_OK) != 0) missing = job.tokenizer;
    for (int i = 0; i < job.ndata && !missing; i++)
        if (access(job.data_files[i], R_OK) != 0) missing = job.data_files[i];
    int rc = 0;
    if (missing && is_default && job.ndata == 1) {
        rc = make_kjv(d, &job, err, errlen);
    } else if (missing) {
        rc = node_errf(err, errlen, "%s: the job's file %s is missing (%s)", job_path, missing,
                       strerror(errno));
    } else if (access(job.config, R_OK) != 0) {
        rc = node_errf(err, errlen, "%s: the job's model config %s: %s", job_path, job.config,
                       strerror(errno));
    }
    job_free(&job);
    return rc;
}

/* ---- the demo ------------------------------------------------------------------ */

static int demo_pool(demo_t *d, char *err, size_t errlen)
{
    double t0 = demo_now_s();
    const char *prefix = demo_loopback ? DEMO_LOOPBACK_PREFIX : DEMO_PREFIX;
    char endpoint[DEMO_NODES][40];
    if (demo_loopback) {
        printf("== pool: %d nodes as processes on loopback, overlay disabled (INSECURE: "
               "nothing is encrypted)\n", DEMO_NODES);
        for (int i = 0; i < DEMO_NODES; i++)
            snprintf(endpoint[i], sizeof endpoint[i], "%s", demo_lo_endpoint[i]);
    } else {
        printf("== pool: %d nodes in network namespaces (wireguard-go)\n", DEMO_NODES);
        if (demo_ns_build(d, err, errlen) != 0) return -1;
        printf("namespaces %s (bridge br0), %s %s %s at %s %s %s\n", demo_ns_hub, demo_ns[0],
               demo_ns[1], demo_ns[2], demo_ip[0], demo_ip[1], demo_ip[2]);
        for (int i = 0; i < DEMO_NODES; i++)
            snprintf(endpoint[i], sizeof endpoint[i], "%s:%s", demo_ip[i], DEMO_PORT);
    }
    char *init_ns[] = {"ip", "netns", "exec", (char *)demo_ns[0], d->exe, "init", "--state",
                       d->state[0], "--name", "a", "--listen-port", DEMO_PORT, "--endpoint",
                       endpoint[0], "--prefix", (char *)prefix, NULL};
    char **init = demo_loopback ? init_ns + 4 : init_ns;
    int fd = open(d->log[0], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return node_errf(err, errlen, "%s: cannot open: %s", d->log[0], strerror(errno));
    char why[512];
    int rc = run_cmd(init, fd, 60, why, sizeof why);
    close(fd);
    if (rc != 0) {
        print_tail(d->log[0], 20);
        if (rc > 0) snprintf(why, sizeof why, "exited %d", rc);
        return node_errf(err, errlen, "shardnode init --state %s: %s", d->state[0], why);
    }
    /* dashboards: on loopback the nodes share the host's ports, so one each */
    char http[DEMO_NODES][32];
    for (int i = 0; i < DEMO_NODES; i++)
        snprintf(http[i], sizeof http[i], "127.0.0.1:%d", 7980 + (demo_loopback ? i : 0));
    char *up[] = {"up", "--state", d->state[0], "--threads", "1", "--http", http[0], NULL};
    if (node_start(d, 0, up, err, errlen) != 0) return -1;
    printf("node a: up (mesh %s, endpoint %s), log %s\n", prefix, endpoint[0], d->log[0]);
    for (int i = 1; i < DEMO_NODES; i++) {
        if (wait_status(d, i - 1, 0, 30, err, errlen) != 0) return -1;
        char *invite_ns[] = {"ip", "netns", "exec", (char *)demo_ns[i - 1], d->exe, "invite",
                             "--state", d->state[i - 1], NULL};
        char **invite = demo_loopback ? invite_ns + 4 : invite_ns;
        char out[4096];
        rc = demo_run_capture(invite, out, sizeof out, 30, why, sizeof why);
        if (rc != 0) {
            if (rc > 0) snprintf(why, sizeof why, "exited %d", rc);
            return node_errf(err, errlen, "shardnode invite --state %s: %s", d->state[i - 1],
                             why);
        }
        /* the token is the last word of stdout */
        size_t len = strlen(out);
        while (len && (out[len - 1] == '\n' || out[len - 1] == ' ' || out[len - 1] == '\t'))
            out[--len] = '\0';
        char *tok = out + len;
        while (tok > out && tok[-1] != ' ' && tok[-1] != '\n' && tok[-1] != '\t') tok--;
        if (!*tok)
            return node_errf(err, errlen, "shardnode invite --state %s printed no token",
                             d->state[i - 1]);
        char name[8];
        snprintf(name, sizeof name, "%s", demo_names[i]);
        char port[8];
        snprintf(port, sizeof port, "%s", strrchr(endpoint[i], ':') + 1);
        char *join[] = {"join", tok, "--state", d->state[i], "--name", name, "--listen-port",
                        port, "--endpoint", endpoint[i], "--threads", "1", "--http", http[i],
                        NULL};
        unlink(d->log[i]);
        if (node_start(d, i, join, err, errlen) != 0) return -1;
        printf("node %s: joining through an invite from %s (endpoint %s), log %s\n", name,
               demo_names[i - 1], endpoint[i], d->log[i]);
    }
    /* every node must see every member alive, not only a */
    double end = demo_now_s() + 60;
    for (int i = 0; i < DEMO_NODES; i++)
        if (wait_status(d, i, DEMO_NODES, end - demo_now_s() > 1 ? end - demo_now_s() : 1, err,
                        errlen))
            return -1;
    printf("pool: %d members alive after %.1f s\n", DEMO_NODES, demo_now_s() - t0);
    if (demo_loopback)
        printf("dashboard: http://%s/ (node a; b on %s, c on %s)\n", http[0], http[1], http[2]);
    else
        printf("dashboard: http://%s/ inside namespace %s (node a; e.g. `ip netns exec %s curl "
               "-s http://%s/metrics`)\n", http[0], demo_ns[0], demo_ns[0], http[0]);
    char *status[] = {d->exe, "status", "--state", d->state[0], NULL};
    if (demo_run_ok(status, 30, err, errlen) != 0) return -1;
    return 0;
}

static int demo_run(demo_t *d, const char *job_path, char *err, size_t errlen)
{
    printf("== job: %s on the pool, submitted through node a\n", job_path);
    double t0 = demo_now_s();
    char *train[] = {d->exe, "train", "--state", d->state[0], "--job", (char *)job_path,
                     "--wait", NULL};
    char why[512];
    int rc = run_cmd(train, -1, 0, why, sizeof why);
    if (rc != 0) {
        if (rc > 0) snprintf(why, sizeof why, "exited %d", rc);
        return node_errf(err, errlen, "shardnode train --state %s --job %s --wait: %s",
                         d->state[0], job_path, why);
    }
    printf("job: finished in %.1f s\n", demo_now_s() - t0);
    char *status[] = {d->exe, "status", "--state", d->state[0], NULL};
    if (demo_run_ok(status, 30, err, errlen) != 0) return -1;

    json_t *st = node_control_request(d->state[0], "status", why, sizeof why);
    if (!st) return node_errf(err, errlen, "status of node a: %s", why);
    const char *o = node_json_str(json_object_get(st, "job"), "out_dir");
    char out[PATH_MAX > DEMO_PATH ? PATH_MAX : DEMO_PATH];
    if (o && realpath(o, out)) o = out;   /* configs/kjv/../../out/kjv reads better as out/kjv */
    if (!o || (o != out && snprintf(out, sizeof out, "%s", o) >= (int)sizeof out)) {
        json_decref(st);
        return node_errf(err, errlen, "status of node a names no job.out_dir");
    }
    json_decref(st);

    /* a LoRA job gathers a PEFT adapter directory: sample its base with it */
    char cfg[sizeof out + 32], base[PATH_MAX] = "";
    snprintf(cfg, sizeof cfg, "%s/adapter_config.json", out);
    job_spec job;
    if (access(cfg, F_OK) == 0 && job_load(&job, job_path, err, errlen) == 0) {
        snprintf(base, sizeof base, "%s", job.base_model ? job.base_model : "");
        job_free(&job);
    }
    printf("== sample from the gathered %s (%s)\n", *base ? "adapter" : "model", out);
    char *gen[] = {d->exe, "generate", "--model", *base ? base : out, "--prompt",
                   (char *)demo_prompt, "--tokens", "80", "--temperature", "0.8", "--seed", "7",
                   *base ? "--adapter" : NULL, out, NULL};
    return demo_run_ok(gen, 300, err, errlen);
}

int cmd_demo(int argc, char **argv)
{
    const char *job_opt = NULL, *dir_opt = NULL;
    bool keep = false;
    const args_option opts[] = {{"--job", &job_opt, NULL}, {"--dir", &dir_opt, NULL},
                                {"--keep", NULL, &keep}, {"--prompt", &demo_prompt, NULL}};
    char err[2 * DEMO_PATH];
    if (args_parse(argc, argv, 2, opts, (int)(sizeof opts / sizeof *opts), err, sizeof err) !=
        0) {
        fprintf(stderr, "shardnode demo: %s\n", err);
        fprintf(stderr, "usage: shardnode demo [--job JOB.json] [--dir DIR] [--keep] "
                        "[--prompt TEXT]\n");
        return 2;
    }
    const char *default_job = "configs/kjv/job.json";
    const char *job_path = job_opt ? job_opt : default_job;
    const char *dir = dir_opt ? dir_opt : "out/demo";

    /* Namespaces and WireGuard need root, /dev/net/tun, wireguard-go and ip;
     * without any of them the nodes run on loopback, unencrypted, and say so. */
    const char *why_lo = geteuid() != 0 ? "not root"
                         : access("/dev/net/tun", R_OK | W_OK) != 0 ? "no /dev/net/tun"
                         : !on_path("wireguard-go") ? "wireguard-go is not installed"
                         : !on_path("ip") ? "ip (iproute2) is not installed"
                                          : NULL;
    demo_loopback = why_lo != NULL;
    if (demo_loopback)
        fprintf(stderr, "shardnode demo: %s: the 3 nodes run as processes on loopback with "
                        "the overlay disabled (INSECURE: nothing is encrypted; as root the "
                        "demo uses network namespaces and WireGuard)\n", why_lo);

    static demo_t d;
    memset(&d, 0, sizeof d);
    ssize_t n = readlink("/proc/self/exe", d.exe, sizeof d.exe - 1);
    if (n <= 0 || (size_t)n >= sizeof d.exe - 1) {
        fprintf(stderr, "shardnode demo: readlink /proc/self/exe: %s\n",
                n < 0 ? strerror(errno) : "path too long");
        return 1;
    }
    d.exe[n] = '\0';

    char job_abs[PATH_MAX];
    if (!realpath(job_path, job_abs)) {
        fprintf(stderr, "shardnode demo: --job %s: %s%s\n", job_path, strerror(errno),
                job_opt ? "" : " (run the demo from the repository root, or give --job)");
        return 2;
    }
    char def_abs[PATH_MAX];
    bool is_default = !job_opt || (realpath(default_job, def_abs) && strcmp(def_abs, job_abs) == 0);

    if (make_dirs(dir, err, sizeof err) != 0) {
        fprintf(stderr, "shardnode demo: --dir: %s\n", err);
        return 1;
    }
    char dir_abs[PATH_MAX];
    if (!realpath(dir, dir_abs)) {
        fprintf(stderr, "shardnode demo: --dir %s: %s\n", dir, strerror(errno));
        return 1;
    }
    snprintf(d.dir, sizeof d.dir, "%s", dir_abs);
    for (int i = 0; i < DEMO_NODES; i++) {
        if (snprintf(d.state[i], sizeof d.state[i], "%s/%s", d.dir, demo_names[i]) >=
                (int)sizeof d.state[i] - 32 ||
            snprintf(d.log[i], sizeof d.log[i], "%s/%s.log", d.dir, demo_names[i]) >=
                (int)sizeof d.log[i]) {
            fprintf(stderr, "shardnode demo: --dir %.200s...: path too long\n", d.dir);
            return 2;
        }
    }

    /* one demo at a time: a second one would take the first's namespaces
     * down (the lock goes with the process, however it ends) */
    const char *lock_path = demo_loopback ? "/tmp/shardnode-demo.lock" : "/run/shardnode-demo.lock";
    int lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (lock_fd < 0 || fcntl(lock_fd, F_SETLK, &fl) != 0) {
        int e = errno;
        if (lock_fd >= 0 && (e == EACCES || e == EAGAIN) && fcntl(lock_fd, F_GETLK, &fl) == 0 &&
            fl.l_type != F_UNLCK)
            fprintf(stderr, "shardnode demo: another demo is running (pid %ld holds %s)\n",
                    (long)fl.l_pid, lock_path);
        else
            fprintf(stderr, "shardnode demo: %s: %s\n", lock_path, strerror(e));
        if (lock_fd >= 0) close(lock_fd);
        return 1;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = demo_on_signal;
    sigemptyset(&sa.sa_mask);
    struct sigaction old_int, old_term, old_hup;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGHUP, &sa, &old_hup);
    /* a closed pipe on stdout (`demo | head`) must not skip the cleanup */
    struct sigaction ign, old_pipe;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &old_pipe);

    double t0 = demo_now_s();
    int rc = 1;
    /* leftovers of an earlier demo that was killed before its cleanup */
    if (!demo_loopback) demo_ns_destroy(&d, false);
    for (int i = 0; i < DEMO_NODES; i++) {
        if (access(d.state[i], F_OK) == 0 && remove_tree(d.state[i]) != 0) {
            fprintf(stderr, "shardnode demo: cannot remove the earlier %s: %s\n", d.state[i],
                    strerror(errno));
            goto out;
        }
        unlink(d.log[i]);
    }
    if (check_inputs(&d, job_abs, is_default, err, sizeof err) != 0) {
        fprintf(stderr, "shardnode demo: %s\n", err);
        goto out;
    }
    if (demo_pool(&d, err, sizeof err) != 0) {
        fprintf(stderr, "shardnode demo: %s\n", err);
        if (!demo_signal) print_logs(&d);
        goto out;
    }
    if (demo_run(&d, job_abs, err, sizeof err) != 0) {
        fprintf(stderr, "shardnode demo: %s\n", err);
        if (!demo_signal) print_logs(&d);
        goto out;
    }
    rc = 0;
out:
    if (d.ns_made || d.node[0]) cleanup(&d, keep);
    else if (!keep) rmdir(d.dir);
    if (demo_signal) {
        fprintf(stderr, "shardnode demo: stopped by signal %d\n", (int)demo_signal);
        rc = 128 + demo_signal;
    }
    if (rc == 0) printf("demo: done in %.1f s\n", demo_now_s() - t0);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGHUP, &old_hup, NULL);
    sigaction(SIGPIPE, &old_pipe, NULL);
    close(lock_fd);
    return rc;
}

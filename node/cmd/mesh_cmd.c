/* mesh_cmd.c — the mesh commands a person types:
 *
 *   shardnode up --state DIR [--http ADDR:PORT|off]
 *   shardnode join TOKEN --state DIR [--name NAME] [--listen-port P] [--endpoint HOST:PORT]
 *                  [--http ADDR:PORT|off]
 *   shardnode status --state DIR [--json] [--svg FILE]
 *   shardnode leave --state DIR [--now]
 *   shardnode set --state DIR --threads N
 *
 * up and join run the node (daemon_run) in the foreground; status, leave
 * and set talk to it through DIR/control.sock (node_control_request, daemon.h). */
#include "commands.h"
#include "daemon.h"
#include "node_base.h"
#include "plan_svg.h"
#include "pool_core.h"
#include "pool_doc.h"

#include "keys.h"
#include "mesh.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* --threads N, --device D and --no-compute: how this node takes part in
 * jobs; --http: where its dashboard listens (checked here, bound by the
 * daemon; the device is checked by the daemon, which opens it). */
static int compute_options(const char *threads, bool no_compute, const char *http,
                           const char *device, daemon_options *opt, char *err, size_t errlen)
{
    opt->device = device;
    long n = 0;
    if (threads && args_int(threads, "--threads", 1, 1024, &n, err, errlen)) return -1;
    opt->threads = (int)n;
    opt->no_compute = no_compute;
    char host[64];
    int port;
    if (http && strcmp(http, "off") != 0 &&
        dash_parse_spec(http, host, sizeof host, &port, err, errlen) != 0)
        return -1;
    opt->http = http;
    return 0;
}

int cmd_up(int argc, char **argv)
{
    const char *state = NULL, *threads = NULL, *http = NULL, *device = NULL;
    bool no_compute = false, no_relay = false;
    const args_option opts[] = {{"--state", &state, NULL},
                                {"--threads", &threads, NULL},
                                {"--no-compute", NULL, &no_compute},
                                {"--http", &http, NULL},
                                {"--no-relay", NULL, &no_relay},
                                {"--device", &device, NULL}};
    static const char *const required[] = {"--state", NULL};
    char err[512];
    daemon_options opt = {0};
    if (args_parse(argc, argv, 2, opts, 6, err, sizeof err) != 0 ||
        args_require(opts, 6, required, err, sizeof err) != 0 ||
        compute_options(threads, no_compute, http, device, &opt, err, sizeof err) != 0) {
        fprintf(stderr, "shardnode up: %s\nusage: shardnode up --state DIR [--threads N] "
                        "[--device D] [--no-compute] [--http ADDR:PORT|off] [--no-relay]\n", err);
        return 2;
    }
    opt.no_relay = no_relay;
    return daemon_run(state, &opt);
}

int cmd_join(int argc, char **argv)
{
    const char *state = NULL, *name = NULL, *port_s = NULL, *endpoint = NULL, *threads = NULL,
               *http = NULL, *device = NULL;
    bool no_compute = false, no_relay = false;
    const args_option opts[] = {{"--state", &state, NULL},
                                {"--name", &name, NULL},
                                {"--listen-port", &port_s, NULL},
                                {"--endpoint", &endpoint, NULL},
                                {"--threads", &threads, NULL},
                                {"--no-compute", NULL, &no_compute},
                                {"--http", &http, NULL},
                                {"--no-relay", NULL, &no_relay},
                                {"--device", &device, NULL}};
    const int nopts = (int)(sizeof opts / sizeof *opts);
    static const char *const required[] = {"--state", NULL};
    char err[2048];
    daemon_options opt = {0};
    if (argc < 3 || argv[2][0] == '-' || args_parse(argc, argv, 3, opts, nopts, err, sizeof err) ||
        args_require(opts, nopts, required, err, sizeof err) != 0 ||
        compute_options(threads, no_compute, http, device, &opt, err, sizeof err) != 0) {
        fprintf(stderr, "shardnode join: %s\nusage: shardnode join TOKEN --state DIR [--name "
                "NAME] [--listen-port P] [--endpoint HOST:PORT] [--threads N] [--device D] "
                "[--no-compute] "
                "[--http ADDR:PORT|off] [--no-relay]\n",
                argc < 3 || argv[2][0] == '-' ? "the token comes first" : err);
        return 2;
    }
    const char *text = argv[2];
    /* The token is judged before anything is written. */
    struct token t;
    if (token_decode(text, &t, (int64_t)time(NULL), err, sizeof err) != 0) {
        fprintf(stderr, "shardnode join: %s\n", err);
        return 1;
    }
    char path[NODE_PATH_MAX];
    snprintf(path, sizeof path, "%s/node.json", state);
    if (access(path, F_OK) != 0) {
        if (!name) {
            fprintf(stderr, "shardnode join: %s holds no node yet: give it a --name\n", state);
            return 2;
        }
        if (!node_name_valid(name)) {
            fprintf(stderr, "shardnode join: --name \"%s\": expected 1 to %d characters of "
                    "A-Z a-z 0-9 . _ -\n", name, MESH_NAME_MAX - 1);
            return 2;
        }
        long port = 51820;
        if (port_s && args_int(port_s, "--listen-port", 1, 65535, &port, err, sizeof err)) {
            fprintf(stderr, "shardnode join: %s\n", err);
            return 2;
        }
        if (endpoint && !token_endpoint_valid(endpoint)) {
            fprintf(stderr, "shardnode join: --endpoint \"%s\": expected HOST:PORT or "
                    "[IPv6]:PORT\n", endpoint);
            return 2;
        }
        char overlay[GOSSIP_ADDR_MAX], mesh_hex[33];
        if (state_create(state, name, port, endpoint, t.prefix, t.mesh_id, overlay,
                         sizeof overlay, mesh_hex, err, sizeof err) != 0) {
            fprintf(stderr, "shardnode join: %s\n", err);
            return 1;
        }
        fprintf(stderr, "shardnode join: node %s in %s, overlay address %s in mesh %s\n", name,
                state, overlay, mesh_hex);
    } else if (name || port_s || endpoint) {
        fprintf(stderr, "shardnode join: %s already holds a node; --name, --listen-port and "
                "--endpoint apply only to a new one (edit %s)\n", state, path);
        return 2;
    }
    memset(&t, 0, sizeof t);
    opt.token_text = text;
    opt.no_relay = no_relay;
    return daemon_run(state, &opt);
}

/* The most advanced run among the members' documents (NULL: none). */
static const pool_run *best_run(const pool_status *s)
{
    const pool_run *best = NULL;
    for (int i = 0; i < s->nmembers; i++) {
        const pool_doc *d = s->members[i].doc;
        if ((d->has & POOL_HAS_RUN) && (!best || d->run.step > best->step)) best = &d->run;
    }
    return best;
}

/* The job section of status: the job, each member's part, the plan and
 * progress, and what stands in the way. */
static void print_job(json_t *job)
{
    pool_status s;
    char err[512];
    int rc = pool_status_from_json(job, &s, err, sizeof err);
    if (rc > 0) return;
    if (rc < 0) {
        printf("\njob: the node's status does not read: %s\n", err);
        return;
    }
    printf("\njob %s  submitted by %s%s\n", s.id, s.submitted_by[0] ? s.submitted_by : "?",
           s.stop ? "  (stopped)" : "");
    printf("%-16s %-8s %-8s %-12s %-22s %s\n", "MEMBER", "COMPUTE", "READY", "LAYER F+B",
           "VOTE", "RUN");
    for (int i = 0; i < s.nmembers; i++) {
        const pool_doc *d = s.members[i].doc;
        char fb[32] = "-", vote[40] = "-", rs[96] = "-";
        if (d->has & POOL_HAS_PROF)
            snprintf(fb, sizeof fb, "%.2f ms",
                     1e-6 * (double)(d->prof.prof.fwd_ns[COST_LAYER] +
                                     d->prof.prof.bwd_ns[COST_LAYER]));
        if (d->has & POOL_HAS_VOTE) {
            char p[17];
            pool_hex64(d->vote.v.plan, p);
            snprintf(vote, sizeof vote, "e%lld %.8s", (long long)d->vote.v.epoch, p);
        }
        if ((d->has & POOL_HAS_RUN) && d->run.state != POOL_RUN_NONE)
            snprintf(rs, sizeof rs, "%s step %lld", pool_run_state_name(d->run.state),
                     (long long)d->run.step);
        else if ((d->has & POOL_HAS_RUN) && d->run.gathered >= 0)
            snprintf(rs, sizeof rs, "%s", d->run.gathered ? "gathered the model"
                                                          : "gathering failed");
        printf("%-16s %-8s %-8s %-12s %-22s %s\n", s.members[i].name, d->compute ? "yes" : "no",
               d->ready ? "yes" : "no", fb, vote, rs);
    }
    for (int i = 0; i < s.nmembers; i++) {
        const pool_doc *d = s.members[i].doc;
        const char *name = s.members[i].name;
        for (int k = 0; k < d->lacks.n; k++)
            printf("problem: %s lacks the job's %s %s: %s\n", name, d->lacks.l[k].role,
                   d->lacks.l[k].path, d->lacks.l[k].why);
        if (d->error[0]) printf("problem: %s cannot set the job up: %s\n", name, d->error);
        if (d->prof_error[0]) printf("problem: %s: %s\n", name, d->prof_error);
    }
    if (!s.has_committed) {
        const char *why = NULL;
        for (int i = 0; i < s.nmembers; i++)
            if (s.members[i].doc->why[0]) why = s.members[i].doc->why;
        if (why) printf("problem: no plan fits: %s\n", why);
        else printf("plan: not committed yet (members profile themselves, then vote)\n");
        pool_status_free(&s);
        return;
    }
    const pool_plan *c = &s.committed;
    char h[17];
    pool_hex64(c->hash, h);
    /* the last recovery, as the member that saw it best says it (the one
     * whose record has the most recoveries, then the first that timed it) */
    const pool_recovery *rv = NULL;
    for (int i = 0; i < s.nmembers; i++) {
        const pool_doc *d = s.members[i].doc;
        if (!(d->has & POOL_HAS_REC)) continue;
        if (!rv || d->rec.n > rv->n || (d->rec.n == rv->n && rv->ms < 0 && d->rec.ms >= 0))
            rv = &d->rec;
    }
    if (rv && rv->ms >= 0)
        printf("recovered: %lld time(s); the last from %s%s at step %lld: epoch %lld resumed "
               "after step %lld (%lld redone), first step %.1f s after the loss\n",
               (long long)rv->n, rv->lost[0] ? "the loss of " : "a broken pipeline", rv->lost,
               (long long)rv->at, (long long)rv->epoch, (long long)rv->from,
               (long long)(rv->at > rv->from ? rv->at - rv->from : 0), 1e-3 * (double)rv->ms);
    else if (rv)
        printf("recovering: from %s%s at step %lld%s\n",
               rv->lost[0] ? "the loss of " : "a broken pipeline", rv->lost, (long long)rv->at,
               rv->epoch ? " (the new plan is running)" : " (a new plan is being voted)");
    /* the last planned switch (docs/ARCHITECTURE.md, "Planned switches"),
     * as the member with the most of them says it; and why the running plan
     * stays or is being switched, as a member says it */
    const pool_switch_rec *sw = NULL;
    const char *why = NULL;
    for (int i = 0; i < s.nmembers; i++) {
        const pool_doc *d = s.members[i].doc;
        if (d->why[0] && !why) why = d->why;
        if (!(d->has & POOL_HAS_SWR)) continue;
        if (!sw || d->swr.n > sw->n || (d->swr.n == sw->n && sw->ms < 0 && d->swr.ms >= 0))
            sw = &d->swr;
    }
    if (sw) {
        printf("switched: %lld time(s); the last after step %lld (%s): epoch %lld, %.1f MB "
               "moved, predicted step %.1f ms", (long long)sw->n, (long long)sw->from,
               pool_switch_why_name(sw->why), (long long)sw->epoch, sw->mb, sw->pred_ms);
        if (sw->old_ms > 0) printf(" (%.1f ms measured before)", sw->old_ms);
        if (sw->ms >= 0) printf(", first step %.1f s after the commit", 1e-3 * (double)sw->ms);
        printf("\n");
    }
    if (why) printf("replanning: %s\n", why);
    printf("plan: epoch %lld, hash %s, micro-batch %lld, predicted step %.1f ms", (long long)c->epoch,
           h, (long long)c->mb, 1e-6 * (double)c->step_ns);
    if (c->resume_step > 0) printf(", resumed after step %lld", (long long)c->resume_step);
    if (c->handover) printf(", a planned switch");
    if (c->snapshot_every > 0)
        printf(", snapshots every %ld steps (a loss redoes at most %lld)",
               job_snapshot_interval((long)c->snapshot_every), (long long)c->snapshot_every);
    if (c->has_shared && c->step_ns_shared > c->step_ns)
        printf(" (%.1f ms with stages sharing a machine's cores)", 1e-6 * (double)c->step_ns_shared);
    printf("\n");
    for (int i = 0; i < c->nstages; i++)
        printf("  stage %d: %-16s layers %d..%d\n", i, c->stage[i].holder[0].name,
               c->stage[i].layer_begin, c->stage[i].layer_end - 1);
    /* progress: the last stage's view (every stage has the loss) */
    const pool_run *best = best_run(&s);
    if (best && best->has_step)
        printf("progress: step %lld/%lld  loss %.4f  %.0f tok/s\n", (long long)best->step,
               (long long)best->steps, best->loss, best->tps);
    for (int i = 0; i < s.nmembers; i++) {
        const pool_doc *d = s.members[i].doc;
        if ((d->has & POOL_HAS_RUN) && d->run.error[0])
            printf("problem: %s: %s\n", s.members[i].name, d->run.error);
    }
    if (s.has_run && s.run.gathered >= 0)
        printf("model: %s %s\n", s.run.gathered ? "gathered into" : "gathering failed for",
               s.out_dir && s.out_dir[0] ? s.out_dir : "?");
    pool_status_free(&s);
}

static void print_table(json_t *st)
{
    json_t *list = json_object_get(st, "members"), *m;
    size_t i;
    printf("mesh %s  prefix %s  this node: %s\n",
           node_json_str(st, "mesh_id") ? node_json_str(st, "mesh_id") : "?",
           node_json_str(st, "prefix") ? node_json_str(st, "prefix") : "?",
           node_json_str(st, "self") ? node_json_str(st, "self") : "?");
    printf("%-16s %-8s %-16s %-24s %-12s %-7s %-10s %s\n", "NAME", "STATE", "ADDRESS",
           "ENDPOINT", "LINK", "RTT", "HEARD", "DEVICES");
    json_array_foreach(list, i, m) {
        const char *ep = node_json_str(m, "endpoint");
        json_t *heard = json_object_get(m, "last_heard_s");
        char h[32] = "-";
        if (json_is_number(heard)) snprintf(h, sizeof h, "%.1fs ago", json_number_value(heard));
        json_t *dev = json_object_get(m, "devices"), *cpu = json_object_get(dev, "cpu");
        char devs[160] = "-";
        const char *model = node_json_str(cpu, "model");
        json_t *cores = json_object_get(cpu, "cores");
        json_t *gpus = json_object_get(dev, "gpus");
        if (model)
            snprintf(devs, sizeof devs, "%.60s x%lld%s", model,
                     (long long)json_integer_value(cores),
                     json_array_size(gpus) ? " + GPUs" : "");
        const char *link = node_json_str(m, "link");
        const char *via = node_json_str(json_object_get(m, "relay"), "via");
        char relayed[12 + MESH_NAME_MAX];
        if (link && via && strcmp(link, "relayed") == 0) {
            snprintf(relayed, sizeof relayed, "relayed via %s", via);
            link = relayed;
        }
        json_t *rtt = json_object_get(m, "rtt_ms");
        char r[16] = "-";
        if (json_is_integer(rtt))
            snprintf(r, sizeof r, json_integer_value(rtt) < 1 ? "<1ms" : "%lldms",
                     (long long)json_integer_value(rtt));
        printf("%-16s %-8s %-16s %-24s %-12s %-7s %-10s %s\n", node_json_str(m, "name"),
               node_json_str(m, "state"), node_json_str(m, "address"), ep ? ep : "-",
               link ? link : "-", r, h, devs);
    }
    /* Pairs without a WireGuard path (PROTOCOL.md, "Hole punching"). */
    json_array_foreach(list, i, m) {
        const char *link = node_json_str(m, "link"), *name = node_json_str(m, "name");
        if (link && strcmp(link, "pending") == 0)
            printf("note: %s: no WireGuard handshake with this node yet (just joined, or "
                   "punching through NAT); it is heard through other members\n", name);
        else if (link && strcmp(link, "relayed") == 0) {
            json_t *rl = json_object_get(m, "relay"), *tr = json_object_get(m, "traffic");
            json_t *rtt = json_object_get(m, "rtt_ms");
            printf("note: %s is relayed via %s (its port %lld, for %.0f s; round trip %s%lld ms; "
                   "in %.1f kB/s, out %.1f kB/s over the last second): neither side's router "
                   "lets the other in\n", name, node_json_str(rl, "via") ? node_json_str(rl, "via") : "?",
                   (long long)json_integer_value(json_object_get(rl, "port")),
                   json_number_value(json_object_get(rl, "since_s")),
                   json_is_integer(rtt) ? "" : "? ", (long long)json_integer_value(rtt),
                   json_number_value(json_object_get(tr, "rx_bytes_s")) / 1e3,
                   json_number_value(json_object_get(tr, "tx_bytes_s")) / 1e3);
        } else if (link && strcmp(link, "unreachable") == 0)
            printf("note: %s is alive but this node cannot reach it directly (both behind "
                   "NATs that punching does not get through, and no member relays for the "
                   "pair yet); it is heard through other members\n", name);
    }
    print_job(json_object_get(st, "job"));
}

int cmd_status(int argc, char **argv)
{
    const char *state = NULL, *svg = NULL;
    bool json = false;
    const args_option opts[] = {{"--state", &state, NULL}, {"--json", NULL, &json},
                                {"--svg", &svg, NULL}};
    static const char *const required[] = {"--state", NULL};
    char err[NODE_PATH_MAX + 256];
    if (args_parse(argc, argv, 2, opts, 3, err, sizeof err) != 0 ||
        args_require(opts, 3, required, err, sizeof err) != 0) {
        fprintf(stderr, "shardnode status: %s\nusage: shardnode status --state DIR [--json] "
                "[--svg FILE]\n", err);
        return 2;
    }
    json_t *st = node_control_request(state, "status", err, sizeof err);
    if (!st) {
        fprintf(stderr, "shardnode status: %s\n", err);
        return 1;
    }
    if (svg) { /* the dashboard's drawing of the committed plan */
        plan_svg *ps = malloc(sizeof *ps);
        int rc = ps ? 0 : node_errf(err, sizeof err, "out of memory");
        if (ps && plan_svg_from_status(st, ps) != 0)
            fprintf(stderr, "shardnode status: no plan is committed; %s shows none\n", svg);
        if (rc == 0) rc = plan_svg_write(ps, svg, err, sizeof err);
        free(ps);
        if (rc != 0) {
            fprintf(stderr, "shardnode status: --svg %s\n", err);
            json_decref(st);
            return 1;
        }
    }
    if (json) {
        char *text = json_dumps(st, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (text) printf("%s\n", text);
        free(text);
    } else {
        print_table(st);
    }
    json_decref(st);
    return 0;
}

/* The node's reply to req (taken) on STATE/control.sock; NULL, said on
 * stderr as `shardnode CMD: ...`, when it cannot be asked or refuses. */
static json_t *ask_node(const char *cmd, const char *state, json_t *req)
{
    char err[1024];
    json_t *r = req ? node_control_call(state, req, err, sizeof err) : NULL;
    if (!r) fprintf(stderr, "shardnode %s: %s\n", cmd, req ? err : "out of memory");
    json_decref(req);
    const char *e = r ? node_json_str(r, "error") : NULL;
    if (e) {
        fprintf(stderr, "shardnode %s: the node refused: %s\n", cmd, e);
        json_decref(r);
        r = NULL;
    }
    return r;
}

int cmd_leave(int argc, char **argv)
{
    const char *state = NULL;
    bool now = false;
    const args_option opts[] = {{"--state", &state, NULL}, {"--now", NULL, &now}};
    static const char *const required[] = {"--state", NULL};
    char err[1024];
    if (args_parse(argc, argv, 2, opts, 2, err, sizeof err) != 0 ||
        args_require(opts, 2, required, err, sizeof err) != 0) {
        fprintf(stderr, "shardnode leave: %s\nusage: shardnode leave --state DIR [--now]\n",
                err);
        return 2;
    }
    json_t *r = ask_node("leave", state, json_pack("{s:s,s:b}", "cmd", "leave", "now", now));
    if (!r) return 1;
    bool handover = json_is_true(json_object_get(r, "handover"));
    json_decref(r);
    /* a member holding a stage hands its layers over first (at most
     * POOL_DEPART_MS), then leaves */
    int wait_s = handover ? POOL_DEPART_MS / 1000 + 10 : 10;
    if (handover) {
        printf("leave: this node holds a stage of the running job: it hands its layers over to "
               "a plan without it first (at most %d s; `shardnode leave --now` leaves at once "
               "and the pool recovers without it)\n", POOL_DEPART_MS / 1000);
        fflush(stdout);
    }
    /* Done when the node has exited: its lock is free again. */
    char path[NODE_PATH_MAX];
    snprintf(path, sizeof path, "%s/node.lock", state);
    for (int i = 0; i < wait_s * 10; i++) {
        int fd = open(path, O_RDWR | O_CLOEXEC);
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        bool free_now = fd >= 0 && fcntl(fd, F_SETLK, &fl) == 0;
        if (fd >= 0) close(fd);
        if (free_now) {
            printf("left the mesh; %s can no longer rejoin it (join again with a new state "
                   "directory)\n", state);
            return 0;
        }
        nanosleep(&(struct timespec){0, 100000000}, NULL);
    }
    fprintf(stderr, "shardnode leave: the node announced it leaves but is still running after "
            "%d s\n", wait_s);
    return 1;
}

int cmd_set(int argc, char **argv)
{
    const char *state = NULL, *threads = NULL;
    const args_option opts[] = {{"--state", &state, NULL}, {"--threads", &threads, NULL}};
    static const char *const required[] = {"--state", "--threads", NULL};
    char err[1024];
    long n = 0;
    if (args_parse(argc, argv, 2, opts, 2, err, sizeof err) != 0 ||
        args_require(opts, 2, required, err, sizeof err) != 0 ||
        args_int(threads, "--threads", 1, 1024, &n, err, sizeof err) != 0) {
        fprintf(stderr, "shardnode set: %s\nusage: shardnode set --state DIR --threads N\n", err);
        return 2;
    }
    json_t *r = ask_node("set", state, json_pack("{s:s,s:i}", "cmd", "set", "threads", (int)n));
    if (!r) return 1;
    long long got = json_integer_value(json_object_get(r, "threads")),
              st = json_integer_value(json_object_get(r, "stage_threads"));
    if (json_is_true(json_object_get(r, "stage")))
        printf("set: this node computes with %lld thread%s; its running stage takes %lld from "
               "its next step%s\n", got, got == 1 ? "" : "s", st,
               st < got ? " (the most it started with; the rest at its next start)" : "");
    else
        printf("set: this node computes with %lld thread%s from its next stage on\n", got,
               got == 1 ? "" : "s");
    json_decref(r);
    return 0;
}

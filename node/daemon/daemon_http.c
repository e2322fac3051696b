/* daemon_http.c — the dashboard every node serves (`up --http ADDR:PORT`,
 * default 127.0.0.1:7980, `--http off`): libevent's evhttp in the daemon's
 * own event loop, read-only.
 *
 *   /             one HTML document: inline SVG and a small plain script
 *                 that polls /api/status (no external assets)
 *   /api/status   status --json's document (daemon_status_json, the same
 *                 function the control socket answers with) plus
 *                 "dashboard": the run's metrics series, the plan drawn as
 *                 SVG (plan_svg.c) and the node's recent events
 *   /metrics      the Prometheus text exposition format
 *
 * Only GET and HEAD (others: 405); anything but these paths: 404. Headers
 * and bodies are size-limited and every connection has a timeout, so a
 * slow or stuck client costs a socket, never the loop. Nothing secret is
 * served: the status document holds public keys only. docs/FORMATS.md,
 * "Dashboard and metrics". */
#include "daemon_internal.h"
#include "node_base.h"
#include "plan_svg.h"
#include "pool_doc.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DASH_MAX_HEADERS 8192    /* bytes of a request's headers */
#define DASH_MAX_BODY 1024       /* GET carries none */
#define DASH_TIMEOUT_S 10        /* per connection: read and write */
#define DASH_SERIES_MAX 2000     /* points of the metrics series */
#define DASH_SERIES_TAIL (1 << 20) /* bytes read from the end of metrics.jsonl */
#define DASH_EVENTS 64
#define DASH_TRACK 256           /* members whose state changes become events */

typedef struct {
    int64_t at_ms; /* Unix ms: shown */
    char text[240];
} dash_event;

struct dash {
    struct evhttp *http;
    char addr[80];
    dash_event ev[DASH_EVENTS];
    int nev, head;                     /* ring: head is the next slot */
    bool primed;                       /* the first look seeded the state below */
    char names[DASH_TRACK][MESH_NAME_MAX];
    int states[DASH_TRACK];
    int ntrack;
    char plan_h[40], job_id[40];
    char run_state[DASH_TRACK][24];    /* per tracked member: its job run's state */
    int64_t next_look_ms;
};

/* ---- ADDR:PORT ---- */

int dash_parse_spec(const char *spec, char *host, size_t hostlen, int *port, char *err,
                    size_t errlen)
{
    if (!spec || !*spec) return node_errf(err, errlen, "--http: expected ADDR:PORT or off");
    const char *colon = strrchr(spec, ':');
    size_t hl;
    const char *h = spec;
    if (spec[0] == '[') {
        const char *close = strchr(spec, ']');
        if (!close || close[1] != ':')
            return node_errf(err, errlen, "--http \"%s\": expected [IPv6]:PORT", spec);
        h = spec + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        if (!colon) return node_errf(err, errlen, "--http \"%s\": expected ADDR:PORT or off", spec);
        hl = (size_t)(colon - spec);
    }
    if (hl == 0 || hl >= hostlen)
        return node_errf(err, errlen, "--http \"%s\": expected ADDR:PORT or off", spec);
    memcpy(host, h, hl);
    host[hl] = 0;
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || p < 1 || p > 65535)
        return node_errf(err, errlen, "--http \"%s\": the port must be 1 to 65535", spec);
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) != 1 && inet_pton(AF_INET6, host, &a6) != 1)
        return node_errf(err, errlen, "--http \"%s\": %s is not an IP address", spec, host);
    *port = (int)p;
    return 0;
}

/* ---- small helpers ---- */

static void add_headers(struct evhttp_request *req, const char *type)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    if (type) evhttp_add_header(h, "Content-Type", type);
    evhttp_add_header(h, "Cache-Control", "no-store");
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(h, "X-Frame-Options", "DENY");
    evhttp_add_header(h, "Referrer-Policy", "no-referrer");
    evhttp_add_header(h, "Content-Security-Policy",
                      "default-src 'none'; script-src 'unsafe-inline'; style-src "
                      "'unsafe-inline'; img-src data:; connect-src 'self'; base-uri 'none'; "
                      "form-action 'none'; frame-ancestors 'none'");
}

static void dash_add_event(struct dash *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void dash_add_event(struct dash *s, const char *fmt, ...)
{
    dash_event *e = &s->ev[s->head];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->text, sizeof e->text, fmt, ap);
    va_end(ap);
    e->at_ms = daemon_wall_ms();
    s->head = (s->head + 1) % DASH_EVENTS;
    if (s->nev < DASH_EVENTS) s->nev++;
}

/* The job's directory on this node: where its metrics.jsonl is. */
static bool job_dir(json_t *status, char *out, size_t outlen)
{
    pool_status job;
    char err[256];
    if (pool_status_from_json(json_object_get(status, "job"), &job, err, sizeof err) != 0)
        return false;
    const char *jf = job.job_file;
    const char *slash = jf ? strrchr(jf, '/') : NULL;
    bool ok = slash && (size_t)(slash - jf) + 1 <= outlen;
    if (ok) {
        memcpy(out, jf, (size_t)(slash - jf));
        out[slash - jf] = 0;
    }
    pool_status_free(&job);
    return ok;
}

/* The last DASH_SERIES_MAX points of this node's metrics.jsonl (the stage
 * it runs; every stage logs the loss): columns step, loss, tokens_per_s,
 * and val_step / val_loss where validation ran. Empty columns when this
 * node runs no stage. */
static json_t *series_json(json_t *status)
{
    json_t *step = json_array(), *loss = json_array(), *tps = json_array();
    json_t *vstep = json_array(), *vloss = json_array();
    json_t *out = json_pack("{s:o,s:o,s:o,s:o,s:o}", "step", step, "loss", loss,
                            "tokens_per_s", tps, "val_step", vstep, "val_loss", vloss);
    char dir[DAEMON_PATH_MAX], path[DAEMON_PATH_MAX + 32];
    if (!out || !job_dir(status, dir, sizeof dir)) return out;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat sb;
    if (fd < 0) return out;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return out;
    }
    off_t from = sb.st_size > DASH_SERIES_TAIL ? sb.st_size - DASH_SERIES_TAIL : 0;
    size_t len = (size_t)(sb.st_size - from), got = 0;
    char *buf = malloc(len + 1);
    if (!buf) {
        close(fd);
        return out;
    }
    while (got < len) {
        ssize_t r = pread(fd, buf + got, len - got, from + (off_t)got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = 0;
    /* a cut first line (reading from the middle) and a half-written last
     * one are skipped: only complete lines are parsed */
    char *p = buf;
    if (from > 0) {
        char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : buf + got;
    }
    /* count the lines to keep the last DASH_SERIES_MAX */
    size_t lines = 0;
    for (char *q = p; (q = strchr(q, '\n')); q++) lines++;
    size_t skip = lines > DASH_SERIES_MAX ? lines - DASH_SERIES_MAX : 0;
    for (char *nl; (nl = strchr(p, '\n')); p = nl + 1) {
        *nl = 0;
        if (skip) {
            skip--;
            continue;
        }
        json_t *m = json_loads(p, 0, NULL);
        json_t *s = json_object_get(m, "step");
        if (json_is_integer(s)) {
            json_t *l = json_object_get(m, "loss"), *t = json_object_get(m, "tokens_per_s");
            json_t *v = json_object_get(m, "val_loss");
            json_array_append(step, s);
            json_array_append_new(loss, json_is_number(l) ? json_real(json_number_value(l))
                                                          : json_null());
            json_array_append_new(tps, json_is_number(t) ? json_real(json_number_value(t))
                                                         : json_null());
            if (json_is_number(v)) {
                json_array_append(vstep, s);
                json_array_append_new(vloss, json_real(json_number_value(v)));
            }
        }
        json_decref(m);
    }
    free(buf);
    return out;
}

static json_t *events_json(struct dash *s)
{
    json_t *a = json_array();
    for (int i = 0; i < s->nev; i++) {
        const dash_event *e = &s->ev[(s->head - s->nev + i + DASH_EVENTS) % DASH_EVENTS];
        json_array_append_new(a, json_pack("{s:I,s:s}", "at_ms", (json_int_t)e->at_ms, "text",
                                           e->text));
    }
    return a;
}

/* /api/status: the status document and the dashboard's additions. */
static json_t *api_status(daemon_t *d)
{
    json_t *st = daemon_status_json(d);
    if (!st) return NULL;
    json_t *dash = json_object();
    json_object_set_new(dash, "series", series_json(st));
    plan_svg *ps = malloc(sizeof *ps);
    char *svg = NULL;
    if (ps) {
        plan_svg_from_status(st, ps);
        svg = plan_svg_render(ps);
        free(ps);
    }
    json_object_set_new(dash, "plan_svg", svg ? json_string(svg) : json_null());
    free(svg);
    json_object_set_new(dash, "events", events_json(d->dash));
    json_object_set_new(st, "dashboard", dash);
    return st;
}

/* ---- /metrics: the Prometheus text exposition format ---- */

static void metric_head(struct evbuffer *b, const char *name, const char *type, const char *help)
{
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value with \ " and newline escaped. */
static void label_value(char *out, size_t outlen, const char *v)
{
    size_t o = 0;
    for (; v && *v && o + 3 < outlen; v++) {
        if (*v == '\\' || *v == '"') {
            out[o++] = '\\';
            out[o++] = *v;
        } else if (*v == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else {
            out[o++] = *v;
        }
    }
    out[o] = 0;
}

static void sample(struct evbuffer *b, const char *name, const char *labels, double v)
{
    /* %.17g of a finite double is a Go ParseFloat value; NaN and Inf as
     * Prometheus spells them */
    char num[40];
    if (v != v) snprintf(num, sizeof num, "NaN");
    else if (v > 1.7976931348623157e308) snprintf(num, sizeof num, "+Inf");
    else if (v < -1.7976931348623157e308) snprintf(num, sizeof num, "-Inf");
    else snprintf(num, sizeof num, "%.17g", v);
    evbuffer_add_printf(b, "%s%s%s%s %s\n", name, labels && *labels ? "{" : "",
                        labels ? labels : "", labels && *labels ? "}" : "", num);
}

/* The most advanced run among the job's member documents (NULL: none). */
static const pool_run *best_run(const pool_status *job)
{
    const pool_run *best = NULL;
    for (int i = 0; i < job->nmembers; i++) {
        const pool_doc *m = job->members[i].doc;
        if ((m->has & POOL_HAS_RUN) && m->run.has_step && (!best || m->run.step > best->step))
            best = &m->run;
    }
    return best;
}

static void metrics_text(daemon_t *d, struct evbuffer *b)
{
    json_t *st = daemon_status_json(d);
    if (!st) return;
    json_t *members = json_object_get(st, "members"), *m;
    size_t i;
    static const char *const states[] = {"alive", "suspect", "dead", "left"};
    metric_head(b, "shardnode_members", "gauge", "Members of the mesh in this node's view, by state.");
    for (int k = 0; k < 4; k++) {
        int n = 0;
        json_array_foreach(members, i, m) {
            const char *s = node_json_str(m, "state");
            if (s && strcmp(s, states[k]) == 0) n++;
        }
        char l[64];
        snprintf(l, sizeof l, "state=\"%s\"", states[k]);
        sample(b, "shardnode_members", l, n);
    }
    metric_head(b, "shardnode_gossip_unauthenticated_total", "counter",
                "Gossip datagrams and frames dropped for want of a valid MAC.");
    sample(b, "shardnode_gossip_unauthenticated_total", NULL,
           (double)json_integer_value(json_object_get(st, "gossip_unauthenticated")));
    metric_head(b, "shardnode_recoveries_total", "counter",
                "Recoveries of the running job after a member was lost.");
    sample(b, "shardnode_recoveries_total", NULL, 0);

    pool_status job;
    char jerr[256];
    bool has_job = pool_status_from_json(json_object_get(st, "job"), &job, jerr, sizeof jerr) == 0;
    const pool_run *run = has_job ? best_run(&job) : NULL;
    metric_head(b, "shardnode_job_running", "gauge",
                "1 while a job's plan is committed and its stages train, else 0.");
    bool running = false;
    for (int k = 0; has_job && k < job.nmembers; k++) {
        const pool_doc *m = job.members[k].doc;
        if ((m->has & POOL_HAS_RUN) && m->run.state == POOL_RUN_RUNNING) running = true;
    }
    sample(b, "shardnode_job_running", NULL, running ? 1 : 0);
    if (run) {
        metric_head(b, "shardnode_step", "gauge", "Training steps completed by the job.");
        sample(b, "shardnode_step", NULL, (double)run->step);
        if (run->has_steps) {
            metric_head(b, "shardnode_steps", "gauge", "Training steps the job runs in all.");
            sample(b, "shardnode_steps", NULL, (double)run->steps);
        }
        if (run->has_loss) {
            metric_head(b, "shardnode_loss", "gauge", "Training loss of the last step (nats per token).");
            sample(b, "shardnode_loss", NULL, run->loss);
        }
        if (run->has_tps) {
            metric_head(b, "shardnode_tokens_per_second", "gauge",
                        "Tokens trained per second in the last step.");
            sample(b, "shardnode_tokens_per_second", NULL, run->tps);
        }
        if (run->has_step_ms) {
            metric_head(b, "shardnode_step_seconds", "gauge", "Duration of the last step.");
            sample(b, "shardnode_step_seconds", NULL, run->step_ms / 1e3);
        }
    }
    /* validation loss: this node's series (metrics.jsonl) */
    json_t *ser = series_json(st);
    json_t *vl = json_object_get(ser, "val_loss");
    if (json_array_size(vl)) {
        metric_head(b, "shardnode_validation_loss", "gauge",
                    "Validation loss at the last validation (nats per token).");
        sample(b, "shardnode_validation_loss", NULL,
               json_number_value(json_array_get(vl, json_array_size(vl) - 1)));
    }
    json_decref(ser);

    const pool_plan *c = has_job && job.has_committed ? &job.committed : NULL;
    if (c && c->nstages) {
        metric_head(b, "shardnode_stage_seconds", "gauge",
                    "Per stage of the committed plan: kind=\"predicted\" is the plan's time "
                    "for one micro-batch, kind=\"measured\" the last step as the stage's "
                    "member measured it.");
        for (int k = 0; k < c->nstages; k++) {
            char name[2 * MESH_NAME_MAX], l[256];
            label_value(name, sizeof name, c->stage[k].holder[0].name);
            snprintf(l, sizeof l, "stage=\"%d\",member=\"%s\",kind=\"predicted\"", k, name);
            sample(b, "shardnode_stage_seconds", l, (double)c->stage[k].time_ns / 1e9);
            const pool_status_member *sm = pool_status_member_of(&job, c->stage[k].holder[0].name);
            if (sm && (sm->doc->has & POOL_HAS_RUN) && sm->doc->run.has_step_ms) {
                snprintf(l, sizeof l, "stage=\"%d\",member=\"%s\",kind=\"measured\"", k, name);
                sample(b, "shardnode_stage_seconds", l, sm->doc->run.step_ms / 1e3);
            }
        }
        metric_head(b, "shardnode_stage_layers", "gauge", "Transformer layers a stage holds.");
        for (int k = 0; k < c->nstages; k++) {
            char name[2 * MESH_NAME_MAX], l[256];
            label_value(name, sizeof name, c->stage[k].holder[0].name);
            snprintf(l, sizeof l, "stage=\"%d\",member=\"%s\"", k, name);
            sample(b, "shardnode_stage_layers", l,
                   (double)(c->stage[k].layer_end - c->stage[k].layer_begin));
        }
    }
    /* links as this node measured them (its job document's "links") */
    const pool_status_member *own = has_job ? pool_status_member_of(&job, d->name) : NULL;
    const pool_links *links = own && (own->doc->has & POOL_HAS_LINKS) ? &own->doc->links : NULL;
    if (links && links->n) {
        metric_head(b, "shardnode_link_latency_seconds", "gauge",
                    "Latency to a peer as this node measured it.");
        for (int k = 0; k < links->n; k++) {
            char pv[2 * MESH_NAME_MAX], lab[200];
            label_value(pv, sizeof pv, links->l[k].name);
            snprintf(lab, sizeof lab, "peer=\"%s\"", pv);
            sample(b, "shardnode_link_latency_seconds", lab,
                   (double)links->l[k].latency_ns / 1e9);
        }
        metric_head(b, "shardnode_link_bandwidth_bytes_per_second", "gauge",
                    "Bandwidth to a peer as this node measured it.");
        for (int k = 0; k < links->n; k++) {
            char pv[2 * MESH_NAME_MAX], lab[200];
            label_value(pv, sizeof pv, links->l[k].name);
            snprintf(lab, sizeof lab, "peer=\"%s\"", pv);
            sample(b, "shardnode_link_bandwidth_bytes_per_second", lab,
                   (double)links->l[k].bandwidth);
        }
    }
    if (has_job) pool_status_free(&job);
    /* bytes per peer: WireGuard's counters (none on the insecure loopback) */
    if (d->wg) {
        const gossip_member *const *ms;
        size_t n = gossip_members(d->g, &ms);
        for (int dir = 0; dir < 2; dir++) {
            const char *name = dir ? "shardnode_peer_sent_bytes_total"
                                   : "shardnode_peer_received_bytes_total";
            bool head = false;
            for (size_t k = 0; k < n; k++) {
                if (ms[k]->self || ms[k]->displaced) continue;
                const daemon_peer *p = daemon_peer_find(d, ms[k]->rec.wg_pub);
                if (!p) continue;
                if (!head) {
                    metric_head(b, name, "counter",
                                dir ? "Bytes WireGuard sent to a member."
                                    : "Bytes WireGuard received from a member.");
                    head = true;
                }
                char pv[2 * MESH_NAME_MAX], lab[200];
                label_value(pv, sizeof pv, ms[k]->rec.name);
                snprintf(lab, sizeof lab, "peer=\"%s\"", pv);
                sample(b, name, lab, (double)(dir ? p->tx_bytes : p->rx_bytes));
            }
        }
    }
    json_decref(st);
}

/* ---- the page ---- */

static const char dash_page[] =
"<!DOCTYPE html>\n"
"<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
"<title>shardnode</title>\n"
"<style>\n"
"body{font-family:sans-serif;margin:16px;color:#222;background:#fafafa}\n"
"h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:18px 0 6px}\n"
".sub{color:#666;font-size:13px}\n"
"table{border-collapse:collapse;font-size:13px;background:#fff}\n"
"td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}th{background:#eef}\n"
".alive{color:#1b5e20}.suspect{color:#e65100}.dead,.left{color:#b71c1c}\n"
".row{display:flex;gap:16px;flex-wrap:wrap}.card{background:#fff;border:1px solid #ddd;padding:8px}\n"
"#progress{font-size:15px;margin:6px 0}.problem{color:#b71c1c}\n"
"#events{font-size:12px;max-height:220px;overflow:auto;margin:0;padding-left:18px}\n"
"</style></head><body>\n"
"<h1>shardnode <span id=\"self\"></span></h1>\n"
"<div class=\"sub\" id=\"mesh\">loading /api/status ...</div>\n"
"<h2>Members</h2>\n"
"<table id=\"members\"><thead><tr><th>name</th><th>state</th><th>address</th><th>link</th>"
"<th>latency</th><th>bandwidth</th><th>devices</th><th>threads</th><th>memory</th><th>heard</th>"
"<th>run</th>"
"</tr></thead><tbody></tbody></table>\n"
"<h2>Job</h2><div id=\"job\">no job</div>\n"
"<div id=\"progress\"></div>\n"
"<ul id=\"problems\"></ul>\n"
"<h2>Plan</h2><div id=\"plan\" class=\"card\"></div>\n"
"<div class=\"row\"><div><h2>Loss</h2><div id=\"losschart\" class=\"card\"></div></div>\n"
"<div><h2>Tokens/s</h2><div id=\"tpschart\" class=\"card\"></div></div></div>\n"
"<h2>Events</h2><ul id=\"events\"></ul>\n"
"<script>\n"
"'use strict';\n"
"function $(id){return document.getElementById(id);}\n"
"function el(tag,text,cls){var e=document.createElement(tag);if(text!==undefined&&text!==null)"
"e.textContent=String(text);if(cls)e.className=cls;return e;}\n"
"function clear(e){while(e.firstChild)e.removeChild(e.firstChild);}\n"
"function bytes(v){if(!(v>0))return '-';var u=['B','KiB','MiB','GiB','TiB'],i=0;"
"while(v>=1024&&i<4){v/=1024;i++;}return v.toFixed(1)+' '+u[i];}\n"
"function rate(v){if(!(v>0))return '-';if(v>=1e9)return (v/1e9).toFixed(2)+' GB/s';"
"if(v>=1e6)return (v/1e6).toFixed(1)+' MB/s';return (v/1e3).toFixed(1)+' kB/s';}\n"
"function num(v){return typeof v==='number'&&isFinite(v);}\n"
"function chart(box,xs,lines,ylabel){\n"
" var W=520,H=240,L=60,R=10,T=10,B=30,i,k;\n"
" var xmin=Infinity,xmax=-Infinity,ymin=Infinity,ymax=-Infinity;\n"
" for(k=0;k<lines.length;k++){var ln=lines[k];for(i=0;i<ln.ys.length;i++){var x=ln.xs[i],y=ln.ys[i];"
"if(!num(x)||!num(y))continue;xmin=Math.min(xmin,x);xmax=Math.max(xmax,x);"
"ymin=Math.min(ymin,y);ymax=Math.max(ymax,y);}}\n"
" var s='<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"'+W+'\" height=\"'+H+'\" font-size=\"11\" font-family=\"sans-serif\">';\n"
" s+='<rect width=\"'+W+'\" height=\"'+H+'\" fill=\"#fff\"/>';\n"
" if(xmin===Infinity){box.innerHTML=s+'<text x=\"20\" y=\"40\" fill=\"#777\">no points yet</text></svg>';return;}\n"
" if(xmax===xmin)xmax=xmin+1;if(ymax===ymin){ymax+=0.5;ymin-=0.5;}\n"
" function px(x){return L+(x-xmin)*(W-L-R)/(xmax-xmin);}\n"
" function py(y){return H-B-(y-ymin)*(H-T-B)/(ymax-ymin);}\n"
" s+='<line x1=\"'+L+'\" y1=\"'+(H-B)+'\" x2=\"'+(W-R)+'\" y2=\"'+(H-B)+'\" stroke=\"#999\"/>';\n"
" s+='<line x1=\"'+L+'\" y1=\"'+T+'\" x2=\"'+L+'\" y2=\"'+(H-B)+'\" stroke=\"#999\"/>';\n"
" for(i=0;i<=4;i++){var yv=ymin+(ymax-ymin)*i/4;s+='<text x=\"'+(L-4)+'\" y=\"'+(py(yv)+4)+"
"'\" text-anchor=\"end\">'+(Math.abs(ymax)>=1000?yv.toFixed(0):yv.toPrecision(4))+'</text>';}\n"
" s+='<text x=\"'+L+'\" y=\"'+(H-10)+'\">step '+xmin+'</text><text x=\"'+(W-R)+'\" y=\"'+(H-10)+"
"'\" text-anchor=\"end\">step '+xmax+'</text>';\n"
" for(k=0;k<lines.length;k++){var l2=lines[k],p=[];for(i=0;i<l2.ys.length;i++){"
"if(num(l2.xs[i])&&num(l2.ys[i]))p.push(px(l2.xs[i]).toFixed(1)+','+py(l2.ys[i]).toFixed(1));}\n"
"  if(p.length===1)s+='<circle cx=\"'+p[0].split(',')[0]+'\" cy=\"'+p[0].split(',')[1]+'\" r=\"3\" fill=\"'+l2.color+'\"/>';\n"
"  else s+='<polyline fill=\"none\" stroke-width=\"1.5\" stroke=\"'+l2.color+'\" points=\"'+p.join(' ')+'\"/>';\n"
"  if(p.length)s+='<text x=\"'+(W-R-4)+'\" y=\"'+(T+12+14*k)+'\" text-anchor=\"end\" fill=\"'+l2.color+'\">'+l2.name+'</text>';}\n"
" box.innerHTML=s+'</svg>';\n"
"}\n"
"function render(st){\n"
" $('self').textContent=st.self||'';\n"
" $('mesh').textContent='mesh '+(st.mesh_id||'?')+'  prefix '+(st.prefix||'?')+'  gossip port '+st.gossip_port"
"+'  unauthenticated gossip dropped: '+(st.gossip_unauthenticated||0)+'  (updated '+new Date().toLocaleTimeString()+')';\n"
" var job=st.job||null,jm=(job&&job.members)||{},mine=(jm[st.self]&&jm[st.self].links)||{};\n"
" var tb=$('members').tBodies[0];clear(tb);\n"
" (st.members||[]).forEach(function(m){var tr=el('tr');tr.className='member';\n"
"  var cpu=(m.devices&&m.devices.cpu)||{},l=mine[m.name]||(jm[m.name]&&jm[m.name].links&&jm[m.name].links[st.self])"
"||(!m.self&&jm[st.self]&&jm[st.self].link);\n"
"  var dev=cpu.model?cpu.model+' x'+cpu.cores:'-';if(m.devices&&m.devices.gpus&&m.devices.gpus.length)"
"dev+=' + '+m.devices.gpus.map(function(g){return g.name;}).join(', ');"
"if(m.devices&&num(m.devices.gpus_more)&&m.devices.gpus_more>0)dev+=' and '+m.devices.gpus_more+' more GPUs';\n"
"  var r=jm[m.name]&&jm[m.name].run,rs=r&&r.state?r.state+(num(r.step)?' step '+r.step:''):'-';\n"
"  [m.name+(m.self?' (this node)':''),m.state,m.address,m.link,l?(l[0]/1e6).toFixed(2)+' ms':'-',"
"l?rate(l[1]):'-',dev,jm[m.name]&&num(jm[m.name].threads)?jm[m.name].threads+(jm[m.name].compute===false?' (no compute)':''):'-',bytes(cpu.memory_bytes)+' ('+bytes(m.mem_free)+' free)',"
"num(m.last_heard_s)?m.last_heard_s.toFixed(1)+' s ago':'-',rs].forEach(function(v,i){"
"var td=el('td',v);if(i===1)td.className=m.state;tr.appendChild(td);});tb.appendChild(tr);});\n"
" var probs=$('problems');clear(probs);\n"
" if(!job){$('job').textContent='no job';$('progress').textContent='';}\n"
" else{$('job').textContent='job '+job.id+' submitted by '+(job.submitted_by||'?')+(job.stop?' (stopped)':'')"
"+(job.committed?'':' (plan not committed yet)');\n"
"  var best=null;Object.keys(jm).forEach(function(n){var r=jm[n].run;if(r&&num(r.step)&&(!best||r.step>best.step))best=r;"
"(jm[n].lack||[]).forEach(function(x){probs.appendChild(el('li',n+' lacks the job\\'s '+x.role+' '+x.path+': '+x.why,'problem'));});"
"['error','prof_error','why'].forEach(function(k){if(jm[n][k])probs.appendChild(el('li',n+': '+jm[n][k],'problem'));});"
"if(r&&r.error)probs.appendChild(el('li',n+': '+r.error,'problem'));});\n"
"  var pg=$('progress');clear(pg);\n"
"  var ds=(st.dashboard||{}).series,n=ds&&ds.step?ds.step.length:0;\n"
"  if(best&&n&&ds.step[n-1]>best.step)best={step:ds.step[n-1],steps:best.steps,loss:ds.loss[n-1],tps:ds.tokens_per_s[n-1],step_ms:null};\n"
"  if(best){pg.appendChild(document.createTextNode('step '));pg.appendChild(el('span',best.step)).id='step';"
"pg.appendChild(document.createTextNode(' / '+best.steps+'   loss '));"
"pg.appendChild(el('span',num(best.loss)?best.loss.toFixed(4):'-')).id='loss';"
"pg.appendChild(document.createTextNode('   '+(num(best.tps)?best.tps.toFixed(0):'-')+' tokens/s   '"
"+(num(best.step_ms)?best.step_ms.toFixed(1)+' ms/step':'')));}\n"
" }\n"
" var d=st.dashboard||{};$('plan').innerHTML=d.plan_svg||'';\n"
" var se=d.series||{step:[],loss:[],tokens_per_s:[],val_step:[],val_loss:[]};\n"
" chart($('losschart'),se.step,[{name:'train',color:'#1565c0',xs:se.step,ys:se.loss},"
"{name:'validation',color:'#c62828',xs:se.val_step,ys:se.val_loss}]);\n"
" chart($('tpschart'),se.step,[{name:'tokens/s',color:'#2e7d32',xs:se.step,ys:se.tokens_per_s}]);\n"
" var ev=$('events');clear(ev);(d.events||[]).slice().reverse().forEach(function(e){"
"ev.appendChild(el('li',new Date(e.at_ms).toISOString().replace('T',' ').slice(0,19)+'  '+e.text));});\n"
"}\n"
"function poll(){var x=new XMLHttpRequest();x.open('GET','/api/status');x.onload=function(){"
"if(x.status===200){try{render(JSON.parse(x.responseText));}catch(e){$('mesh').textContent='cannot show the status: '+e;}}"
"else $('mesh').textContent='/api/status answered '+x.status;setTimeout(poll,2000);};"
"x.onerror=function(){$('mesh').textContent='the node does not answer';setTimeout(poll,2000);};x.send();}\n"
"poll();\n"
"</script></body></html>\n";

/* ---- requests ---- */

static void send_json(struct evhttp_request *req, json_t *j)
{
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (!text) {
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return;
    }
    add_headers(req, "application/json");
    struct evbuffer *b = evbuffer_new();
    if (!b) {
        free(text);
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return;
    }
    evbuffer_add(b, text, strlen(text));
    evbuffer_add(b, "\n", 1);
    free(text);
    evhttp_send_reply(req, HTTP_OK, "OK", b);
    evbuffer_free(b);
}

static void dash_request(struct evhttp_request *req, void *arg)
{
    daemon_t *d = arg;
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    if (m != EVHTTP_REQ_GET && m != EVHTTP_REQ_HEAD) {
        add_headers(req, NULL);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
        evhttp_send_error(req, 405, "Method Not Allowed");
        return;
    }
    if (evbuffer_get_length(evhttp_request_get_input_buffer(req)) > 0) {
        evhttp_send_error(req, HTTP_BADREQUEST, NULL);
        return;
    }
    const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
    const char *path = u ? evhttp_uri_get_path(u) : NULL;
    if (!path) {
        evhttp_send_error(req, HTTP_BADREQUEST, NULL);
        return;
    }
    if (strcmp(path, "/") == 0 || strcmp(path, "/index.html") == 0) {
        add_headers(req, "text/html; charset=utf-8");
        struct evbuffer *b = evbuffer_new();
        if (!b) {
            evhttp_send_error(req, HTTP_INTERNAL, NULL);
            return;
        }
        evbuffer_add_reference(b, dash_page, sizeof dash_page - 1, NULL, NULL);
        evhttp_send_reply(req, HTTP_OK, "OK", b);
        evbuffer_free(b);
    } else if (strcmp(path, "/api/status") == 0) {
        json_t *st = api_status(d);
        send_json(req, st);
        json_decref(st);
    } else if (strcmp(path, "/metrics") == 0) {
        struct evbuffer *b = evbuffer_new();
        if (!b) {
            evhttp_send_error(req, HTTP_INTERNAL, NULL);
            return;
        }
        metrics_text(d, b);
        add_headers(req, "text/plain; version=0.0.4; charset=utf-8");
        evhttp_send_reply(req, HTTP_OK, "OK", b);
        evbuffer_free(b);
    } else {
        add_headers(req, NULL);
        evhttp_send_error(req, HTTP_NOTFOUND, NULL);
    }
}

int dash_open(daemon_t *d, const char *spec)
{
    if (spec && strcmp(spec, "off") == 0) return 0;
    if (!spec) spec = DASH_DEFAULT;
    char host[64], err[256];
    int port;
    if (dash_parse_spec(spec, host, sizeof host, &port, err, sizeof err) != 0) {
        daemon_log(d, "dashboard: %s; the node runs without it", err);
        return 0;
    }
    struct dash *s = calloc(1, sizeof *s);
    if (!s) {
        daemon_log(d, "dashboard: out of memory; the node runs without it");
        return 0;
    }
    d->dash = s;
    struct sockaddr_storage ss;
    socklen_t sl = 0;
    memset(&ss, 0, sizeof ss);
    if (strchr(host, ':')) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        inet_pton(AF_INET6, host, &a->sin6_addr);
        sl = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        inet_pton(AF_INET, host, &a->sin_addr);
        sl = sizeof *a;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 64) != 0) {
        daemon_log(d, "dashboard: cannot listen on %s: %s; the node runs without it (give "
                   "another --http ADDR:PORT, or --http off)", spec, strerror(errno));
        if (fd >= 0) close(fd);
        return 0;
    }
    s->http = evhttp_new(d->base);
    if (!s->http || !evhttp_accept_socket_with_handle(s->http, fd)) {
        daemon_log(d, "dashboard: libevent cannot serve HTTP on %s; the node runs without it",
                   spec);
        if (s->http) evhttp_free(s->http);
        else close(fd);
        s->http = NULL;
        return 0;
    }
    /* every method reaches dash_request, which answers what is not GET or
     * HEAD with 405; libevent's own refusal would be 501, and an unknown
     * method carries libevent's internal "unknown" bit, hence all bits */
    evhttp_set_allowed_methods(s->http, 0xffff);
    evhttp_set_max_headers_size(s->http, DASH_MAX_HEADERS);
    evhttp_set_max_body_size(s->http, DASH_MAX_BODY);
    evhttp_set_timeout(s->http, DASH_TIMEOUT_S);
    evhttp_set_gencb(s->http, dash_request, d);
    snprintf(s->addr, sizeof s->addr, "%s", spec);
    daemon_log(d, "dashboard: http://%s/ (/api/status, /metrics)", spec);
    return 0;
}

void dash_close(daemon_t *d)
{
    struct dash *s = d->dash;
    if (!s) return;
    if (s->http) evhttp_free(s->http);
    free(s);
    d->dash = NULL;
}

/* Once a second: member state changes, a new job, a committed plan and
 * each stage's run state become events. */
void dash_tick(daemon_t *d, int64_t now_ms)
{
    struct dash *s = d->dash;
    if (!s || now_ms < s->next_look_ms) return;
    s->next_look_ms = now_ms + 1000;
    const gossip_member *const *ms;
    size_t n = gossip_members(d->g, &ms);
    for (size_t i = 0; i < n; i++) {
        const gossip_member *m = ms[i];
        if (m->displaced) continue;
        int k = 0;
        while (k < s->ntrack && strcmp(s->names[k], m->rec.name) != 0) k++;
        if (k == s->ntrack) {
            if (k == DASH_TRACK) continue;
            snprintf(s->names[k], sizeof s->names[k], "%s", m->rec.name);
            s->states[k] = (int)m->state;
            s->run_state[k][0] = 0;
            s->ntrack++;
            if (s->primed) dash_add_event(s, "%s joined (%s)", m->rec.name, m->rec.address);
            else dash_add_event(s, "%s: %s (known at start)", m->rec.name,
                                gossip_state_name(m->state));
            continue;
        }
        if (s->states[k] != (int)m->state) {
            const char *was = gossip_state_name((gossip_state)s->states[k]);
            s->states[k] = (int)m->state;
            dash_add_event(s, "%s: %s (was %s)", m->rec.name, gossip_state_name(m->state), was);
        }
    }
    s->primed = true;
    json_t *jj = pool_status_json(d);
    pool_status job;
    char jerr[256];
    if (pool_status_from_json(jj, &job, jerr, sizeof jerr) == 0) {
        const char *id = job.id;
        if (strcmp(id, s->job_id) != 0) {
            snprintf(s->job_id, sizeof s->job_id, "%s", id);
            s->plan_h[0] = 0;
            for (int k = 0; k < s->ntrack; k++) s->run_state[k][0] = 0;
            dash_add_event(s, "job %s submitted by %s", id,
                           job.submitted_by[0] ? job.submitted_by : "?");
        }
        if (job.has_committed) {
            char h[17];
            pool_hex64(job.committed.hash, h);
            if (strcmp(h, s->plan_h) != 0) {
                snprintf(s->plan_h, sizeof s->plan_h, "%s", h);
                dash_add_event(s, "plan %s committed (epoch %lld, %d stages)", h,
                               (long long)job.committed.epoch, job.committed.nstages);
            }
        }
        for (int i = 0; i < job.nmembers; i++) {
            const char *name = job.members[i].name;
            const pool_doc *m = job.members[i].doc;
            if (!(m->has & POOL_HAS_RUN) || m->run.state == POOL_RUN_NONE) continue;
            const char *rs = pool_run_state_name(m->run.state);
            int k = 0;
            while (k < s->ntrack && strcmp(s->names[k], name) != 0) k++;
            if (k == s->ntrack || strcmp(rs, s->run_state[k]) == 0) continue;
            snprintf(s->run_state[k], sizeof s->run_state[k], "%s", rs);
            const char *e = m->run.error[0] ? m->run.error : NULL;
            dash_add_event(s, "%s: stage %s%s%.160s", name, rs, e ? ": " : "", e ? e : "");
        }
        pool_status_free(&job);
    }
    json_decref(jj);
}

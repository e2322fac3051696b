/* plan_svg.c — a plan drawn as a pipeline, as standalone SVG text: one box
 * per stage (member, device, layer range, memory used / limit, predicted
 * and measured time, the bottleneck marked in red) and arrows between
 * consecutive stages labelled with the link's bandwidth. The one drawing
 * of a plan: the dashboard (daemon_http.c), `shardnode status --svg` and
 * `shardnode plan --svg` all call plan_svg_render. */
#include "node_base.h"
#include "plan_svg.h"
#include "pool_doc.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SVG_BOX_W 210
#define SVG_BOX_H 132
#define SVG_GAP 84      /* between boxes: the arrow and its label */
#define SVG_ROW_GAP 60
#define SVG_PER_ROW 5
#define SVG_MARGIN 20
#define SVG_TITLE_H 34

typedef struct {
    char *buf;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *s, const char *fmt, ...)
{
    if (s->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(s->buf ? s->buf + s->len : NULL, s->buf ? s->cap - s->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            s->oom = true;
            return;
        }
        if (s->buf && s->len + (size_t)n < s->cap) {
            s->len += (size_t)n;
            return;
        }
        size_t cap = (s->cap + (size_t)n + 1) * 2;
        char *nb = realloc(s->buf, cap);
        if (!nb) {
            s->oom = true;
            return;
        }
        s->buf = nb;
        s->cap = cap;
    }
}

/* Text for SVG content or an attribute: & < > " ' escaped, control bytes
 * dropped. */
static void sb_text(sbuf *s, const char *t)
{
    for (; t && *t; t++) {
        unsigned char c = (unsigned char)*t;
        if (c == '&') sb_add(s, "&amp;");
        else if (c == '<') sb_add(s, "&lt;");
        else if (c == '>') sb_add(s, "&gt;");
        else if (c == '"') sb_add(s, "&quot;");
        else if (c == '\'') sb_add(s, "&#39;");
        else if (c >= 0x20 && c != 0x7f) sb_add(s, "%c", c);
    }
}

static void fmt_bytes(char *b, size_t n, int64_t v)
{
    if (v >= (int64_t)1 << 30) snprintf(b, n, "%.1f GiB", (double)v / (double)(1 << 30));
    else if (v >= 1 << 20) snprintf(b, n, "%.1f MiB", (double)v / (double)(1 << 20));
    else snprintf(b, n, "%.1f KiB", (double)v / 1024.0);
}

static void fmt_rate(char *b, size_t n, int64_t v)
{
    if (v >= 1000000000) snprintf(b, n, "%.2f GB/s", (double)v * 1e-9);
    else if (v >= 1000000) snprintf(b, n, "%.1f MB/s", (double)v * 1e-6);
    else snprintf(b, n, "%.1f kB/s", (double)v * 1e-3);
}

static void fmt_time(char *b, size_t n, int64_t ns)
{
    if (ns >= 1000000000) snprintf(b, n, "%.3f s", (double)ns * 1e-9);
    else if (ns >= 1000000) snprintf(b, n, "%.1f ms", (double)ns * 1e-6);
    else snprintf(b, n, "%.1f us", (double)ns * 1e-3);
}

static void box_pos(int s, int *x, int *y)
{
    *x = SVG_MARGIN + (s % SVG_PER_ROW) * (SVG_BOX_W + SVG_GAP);
    *y = SVG_MARGIN + SVG_TITLE_H + (s / SVG_PER_ROW) * (SVG_BOX_H + SVG_ROW_GAP);
}

char *plan_svg_render(const plan_svg *p)
{
    sbuf s = {0};
    int n = p->nstages > 0 ? p->nstages : 0;
    int cols = n < SVG_PER_ROW ? (n ? n : 1) : SVG_PER_ROW;
    int rows = n ? (n + SVG_PER_ROW - 1) / SVG_PER_ROW : 1;
    int w = 2 * SVG_MARGIN + cols * SVG_BOX_W + (cols - 1) * SVG_GAP;
    int tw = 2 * SVG_MARGIN + (int)strlen(p->title) * 9; /* the title's width, roughly */
    if (w < tw) w = tw;
    if (w < 480) w = 480;
    int h = 2 * SVG_MARGIN + SVG_TITLE_H + rows * SVG_BOX_H + (rows - 1) * SVG_ROW_GAP;
    sb_add(&s, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plan\" width=\"%d\" "
               "height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
               "font-size=\"12\">\n", w, h, w, h);
    sb_add(&s, "<defs><marker id=\"plan-arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" "
               "markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0 L10,5 "
               "L0,10 z\" fill=\"#555\"/></marker></defs>\n");
    sb_add(&s, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", w, h);
    sb_add(&s, "<text x=\"%d\" y=\"%d\" font-size=\"15\" font-weight=\"bold\">", SVG_MARGIN,
           SVG_MARGIN + 16);
    sb_text(&s, p->title[0] ? p->title : "plan");
    sb_add(&s, "</text>\n");
    if (n == 0) {
        sb_add(&s, "<text x=\"%d\" y=\"%d\" fill=\"#777\">no plan committed</text>\n",
               SVG_MARGIN, SVG_MARGIN + SVG_TITLE_H + 20);
    }
    for (int i = 0; i < n; i++) {
        const plan_svg_stage *st = &p->stage[i];
        int x, y;
        box_pos(i, &x, &y);
        bool bn = i == p->bottleneck;
        sb_add(&s, "<g class=\"stage%s\" data-stage=\"%d\">\n", bn ? " bottleneck" : "", i);
        sb_add(&s, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"8\" fill=\"%s\" "
                   "stroke=\"%s\" stroke-width=\"%d\"/>\n", x, y, SVG_BOX_W, SVG_BOX_H,
               bn ? "#fdecea" : "#eef4fb", bn ? "#c62828" : "#4a78a8", bn ? 3 : 1);
        int ty = y + 18;
        sb_add(&s, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">stage %d: ", x + 10, ty, i);
        sb_text(&s, st->member);
        sb_add(&s, "</text>\n");
        ty += 17;
        sb_add(&s, "<text x=\"%d\" y=\"%d\" fill=\"#444\">", x + 10, ty);
        char dev[40];
        snprintf(dev, sizeof dev, "%.36s", st->device[0] ? st->device : "device ?");
        sb_text(&s, dev);
        sb_add(&s, "</text>\n");
        ty += 17;
        sb_add(&s, "<text x=\"%d\" y=\"%d\" class=\"layers\">%slayers %d..%d%s</text>\n", x + 10,
               ty, st->embed ? "emb + " : "", st->layer_begin, st->layer_end - 1,
               st->head ? " + head" : "");
        if (st->layer_end <= st->layer_begin)
            sb_add(&s, "<text x=\"%d\" y=\"%d\" fill=\"#777\">(no layers)</text>\n",
                   x + 130, ty);
        ty += 17;
        char a[32] = "?", b[32] = "?";
        if (st->mem_used > 0) fmt_bytes(a, sizeof a, st->mem_used);
        if (st->mem_limit > 0) fmt_bytes(b, sizeof b, st->mem_limit);
        sb_add(&s, "<text x=\"%d\" y=\"%d\">memory %s / %s</text>\n", x + 10, ty, a, b);
        ty += 17;
        snprintf(a, sizeof a, "-");
        if (st->predicted_ns > 0) fmt_time(a, sizeof a, st->predicted_ns);
        sb_add(&s, "<text x=\"%d\" y=\"%d\">predicted %s</text>\n", x + 10, ty, a);
        ty += 17;
        snprintf(a, sizeof a, "-");
        if (st->measured_ns > 0) fmt_time(a, sizeof a, st->measured_ns);
        sb_add(&s, "<text x=\"%d\" y=\"%d\">measured %s</text>\n", x + 10, ty, a);
        if (bn)
            sb_add(&s, "<text x=\"%d\" y=\"%d\" fill=\"#c62828\" font-weight=\"bold\" "
                       "text-anchor=\"end\">bottleneck</text>\n", x + SVG_BOX_W - 8,
                   y + SVG_BOX_H - 9);
        sb_add(&s, "</g>\n");
        if (i + 1 < n) {
            int x2, y2;
            box_pos(i + 1, &x2, &y2);
            char bw[32] = "bandwidth ?";
            if (st->link_bw > 0) fmt_rate(bw, sizeof bw, st->link_bw);
            if (y2 == y) {
                int ay = y + SVG_BOX_H / 2;
                sb_add(&s, "<line class=\"link\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" "
                           "stroke=\"#555\" stroke-width=\"2\" marker-end=\"url(#plan-arrow)\"/>\n",
                       x + SVG_BOX_W, ay, x2, ay);
                sb_add(&s, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\" "
                           "fill=\"#333\">%s</text>\n", x + SVG_BOX_W + SVG_GAP / 2, ay - 7, bw);
            } else { /* down to the next row's first box */
                int ax = x + SVG_BOX_W / 2, my = y + SVG_BOX_H + SVG_ROW_GAP / 2;
                sb_add(&s, "<polyline class=\"link\" points=\"%d,%d %d,%d %d,%d %d,%d\" "
                           "fill=\"none\" stroke=\"#555\" stroke-width=\"2\" "
                           "marker-end=\"url(#plan-arrow)\"/>\n", ax, y + SVG_BOX_H, ax, my,
                       x2 + SVG_BOX_W / 2, my, x2 + SVG_BOX_W / 2, y2);
                sb_add(&s, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#333\">%s</text>\n",
                       ax + 6, y + SVG_BOX_H + 16, bw);
            }
        }
    }
    sb_add(&s, "</svg>\n");
    if (s.oom) {
        free(s.buf);
        return NULL;
    }
    return s.buf;
}

/* The member entry of `name` in status's "members" list (the mesh's list,
 * with each member's devices). */
static json_t *member_of(json_t *status, const char *name)
{
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(status, "members"), i, m) {
        const char *n = node_json_str(m, "name");
        if (n && strcmp(n, name) == 0) return m;
    }
    return NULL;
}

int plan_svg_from_status(json_t *status, plan_svg *out)
{
    memset(out, 0, sizeof *out);
    out->bottleneck = -1;
    pool_status job;
    char err[512];
    int rc = pool_status_from_json(json_object_get(status, "job"), &job, err, sizeof err);
    if (rc != 0 || !job.has_committed) {
        snprintf(out->title, sizeof out->title, "mesh of %s: no plan committed",
                 node_json_str(status, "self") ? node_json_str(status, "self") : "?");
        if (rc == 0) pool_status_free(&job);
        return -1;
    }
    const pool_plan *c = &job.committed;
    char h[17], step[32] = "?";
    pool_hex64(c->hash, h);
    if (c->step_ns > 0) fmt_time(step, sizeof step, c->step_ns);
    snprintf(out->title, sizeof out->title, "job %.16s: plan %.16s, epoch %lld, micro-batch "
             "%lld, predicted step %s", job.id, h, (long long)c->epoch, (long long)c->mb, step);
    int ns = c->nstages;
    if (ns > PLAN_SVG_MAX_STAGES) ns = PLAN_SVG_MAX_STAGES;
    int64_t worst = -1;
    for (int i = 0; i < ns; i++) {
        plan_svg_stage *st = &out->stage[i];
        snprintf(st->member, sizeof st->member, "%s", c->stage[i].holder[0].name);
        st->layer_begin = c->stage[i].layer_begin;
        st->layer_end = c->stage[i].layer_end;
        st->predicted_ns = c->stage[i].time_ns;
        st->embed = i == 0;
        st->head = i + 1 == ns;
        if (st->predicted_ns > worst) {
            worst = st->predicted_ns;
            out->bottleneck = i;
        }
        json_t *m = member_of(status, st->member);
        json_t *cpu = json_object_get(json_object_get(m, "devices"), "cpu");
        if (node_json_str(cpu, "model"))
            snprintf(st->device, sizeof st->device, "%s x%lld", node_json_str(cpu, "model"),
                     (long long)json_integer_value(json_object_get(cpu, "cores")));
        st->mem_limit = json_integer_value(json_object_get(cpu, "memory_bytes"));
        const pool_status_member *sm = pool_status_member_of(&job, st->member);
        const pool_doc *doc = sm ? sm->doc : NULL;
        if (doc && (doc->has & POOL_HAS_THREADS) && st->device[0]) {
            size_t l = strlen(st->device);
            snprintf(st->device + l, sizeof st->device - l, ", %lld thread%s",
                     (long long)doc->threads, doc->threads == 1 ? "" : "s");
        }
        if (doc && (doc->has & POOL_HAS_RUN) && doc->run.has_step_ms)
            st->measured_ns = (int64_t)(doc->run.step_ms * 1e6);
        if (i + 1 < ns) {
            const char *next = c->stage[i + 1].holder[0].name;
            const pool_link *l = doc ? pool_links_find(&doc->links, next) : NULL;
            const pool_status_member *nm = pool_status_member_of(&job, next);
            if (!l && nm) l = pool_links_find(&nm->doc->links, st->member);
            st->link_bw = l ? l->bandwidth : 0;
        }
    }
    out->nstages = ns;
    pool_status_free(&job);
    return 0;
}

int plan_svg_write(const plan_svg *p, const char *path, char *err, size_t errlen)
{
    char *text = plan_svg_render(p);
    if (!text) return node_errf(err, errlen, "%s: out of memory drawing the plan", path);
    FILE *f = fopen(path, "w");
    if (!f) {
        free(text);
        return node_errf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
    }
    size_t len = strlen(text);
    bool ok = fwrite(text, 1, len, f) == len;
    ok = (fclose(f) == 0) && ok;
    free(text);
    if (!ok) return node_errf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    return 0;
}

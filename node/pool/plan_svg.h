/* plan_svg.h — a plan drawn as a pipeline (standalone SVG): one drawing for
 * the dashboard (daemon_http.c), `status --svg` and `plan --svg`. It reads
 * `status --json`'s document through the pool's typed readers, so it lives
 * in the pool room (node/pool/). */
#ifndef SHARDNODE_PLAN_SVG_H
#define SHARDNODE_PLAN_SVG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_t;

#define PLAN_SVG_MAX_STAGES 256
typedef struct {
    char member[64], device[96];
    int layer_begin, layer_end;        /* [begin, end) */
    bool embed, head;
    int64_t mem_used, mem_limit;       /* bytes; 0: not known */
    int64_t predicted_ns, measured_ns; /* the stage's time per micro-batch, its measured
                                          step; 0: not known */
    int64_t link_bw;                   /* bytes/s to the next stage; 0: not known */
} plan_svg_stage;
typedef struct {
    char title[200];
    int nstages;
    int bottleneck;                    /* -1: none marked */
    plan_svg_stage stage[PLAN_SVG_MAX_STAGES];
} plan_svg;
/* The picture as malloc'ed SVG text (NULL: out of memory). */
char *plan_svg_render(const plan_svg *p);
/* From `status --json`'s document: the committed plan, devices from the
 * members, measured step times and links from the job's member documents.
 * -1 when no plan is committed (out is then an empty picture). */
int plan_svg_from_status(struct json_t *status, plan_svg *out);
int plan_svg_write(const plan_svg *p, const char *path, char *err, size_t errlen);

#endif

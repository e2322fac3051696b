/* node.h — the shardnode program: one function per subcommand, plus the
 * argument parsing they share. node/ is the only place where scheduler/,
 * model/ and kernels/ (and, to come, mesh/ and keys/) meet.
 * Each command returns the process exit status and prints its own errors:
 * one line on stderr naming the file, tensor, key or flag at fault. */
#ifndef SHARDNODE_NODE_H
#define SHARDNODE_NODE_H

#include "mesh.h"
#include "model.h"
#include "scheduler.h"

#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

int cmd_gradcheck(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tokenizer(int argc, char **argv);   /* tokenizer_cmd.c */
int cmd_generate(int argc, char **argv);    /* generate_cmd.c */
int cmd_train(int argc, char **argv);       /* train.c */
int cmd_batches(int argc, char **argv);     /* train.c */
int cmd_export(int argc, char **argv);      /* export_cmd.c */
int cmd_plan(int argc, char **argv);        /* plan_cmd.c */
int cmd_profile(int argc, char **argv);     /* profile_cmd.c */
int cmd_link(int argc, char **argv);        /* link_cmd.c */
int cmd_init(int argc, char **argv);        /* init_cmd.c */
int cmd_invite(int argc, char **argv);      /* init_cmd.c */
int cmd_up(int argc, char **argv);          /* mesh_cmd.c */
int cmd_join(int argc, char **argv);        /* mesh_cmd.c */
int cmd_status(int argc, char **argv);      /* mesh_cmd.c */
int cmd_leave(int argc, char **argv);       /* mesh_cmd.c */
int cmd_demo(int argc, char **argv);        /* demo_cmd.c */
int cmd_probe_links(int argc, char **argv); /* pool_fetch.c (run by the daemon) */
int cmd_fetch(int argc, char **argv);       /* pool_fetch.c (run by the daemon) */

/* ---- init_cmd.c: the state directory ---- */
/* Makes a node's state directory: keys (0600), node.json and mesh.json.
 * With join_mesh_id NULL the node founds a new mesh with the given prefix;
 * otherwise it is a joiner of that mesh ("joined": false, no members yet).
 * Fills the overlay address and the mesh id in hex. On failure nothing is
 * left behind. */
int state_create(const char *state, const char *name, long port, const char *endpoint,
                 const char *prefix, const uint8_t *join_mesh_id, char *overlay,
                 size_t overlay_len, char mesh_hex[33], char *err, size_t errlen);
/* Lowercase hex of b[0..n) into out (2n + 1 bytes); the strict reverse
 * (exactly 2n hex digits) returns -1 on anything else. */
void node_hex_encode(const uint8_t *b, size_t n, char *out);
int node_hex_decode(const char *s, uint8_t *b, size_t n);
/* JSON files of the state directory: written through atomic_file with the
 * mode set before any byte (0600 for secrets); read as one object, errors
 * naming file and line. node_json_str: the string at key, or NULL. */
struct json_t;
int node_write_json(const char *path, struct json_t *j, unsigned mode, char *err,
                    size_t errlen);
struct json_t *node_load_json(const char *path, char *err, size_t errlen);
const char *node_json_str(struct json_t *obj, const char *key);
/* One request ({"cmd": CMD}) to the node running on STATE through its
 * control socket; the reply object (json_decref it), or NULL with err
 * ("no node is running on ..."). mesh_cmd.c */
struct json_t *node_control_request(const char *state, const char *cmd, char *err,
                                    size_t errlen);
/* The same with a whole request object (it must hold "cmd"). */
struct json_t *node_control_call(const char *state, struct json_t *req, char *err, size_t errlen);
/* The node's name rule: 1..63 of A-Z a-z 0-9 . _ - */
int node_name_valid(const char *s);

/* ---- daemon.c: the running node ---- */
typedef struct {
    const char *token_text;   /* join: the invite token; NULL: `up` */
    int threads;              /* compute threads for profiling and training; 0: all */
    bool no_compute;          /* a member that votes and watches but holds no stage */
    const char *http;         /* dashboard ADDR:PORT, "off"; NULL: 127.0.0.1:7980 */
} daemon_options;
/* Runs the node of DIR in the foreground until SIGINT/SIGTERM or `leave`;
 * with a token, first joins the mesh through it. Returns 0, or 1 with the
 * reason printed. */
int daemon_run(const char *state, const daemon_options *opt);

/* ---- devices.c: what this build can compute on (node.json "devices") ----
 * The CPU always; GPUs only in a build with CUDA or HIP (none yet). */
#define DEVICES_MAX_GPUS 16
typedef struct {
    char vendor[16];           /* "nvidia", "amd" */
    char name[128];
    int64_t memory_bytes;
    char arch[32];             /* compute capability "9.0" or gfx arch "gfx90a" */
} devices_gpu;

typedef struct {
    char cpu_model[128];       /* /proc/cpuinfo's name for it; "unknown" if none */
    int cpu_cores;             /* logical CPUs online */
    int64_t memory_bytes;      /* physical memory */
    int ngpus;
    devices_gpu gpus[DEVICES_MAX_GPUS];
} devices_info;

/* Best effort: a field the system does not tell stays "unknown" or 0, so
 * it never fails. */
void devices_detect(devices_info *out);
/* {"cpu": {...}, "gpus": [...]} as docs/FORMATS.md describes; NULL when
 * out of memory. The caller owns the reference. */
struct json_t *devices_to_json(const devices_info *d);

/* ---- fleet.c: fleet files and configs/devices.json (docs/FORMATS.md) ----
 * Nodes with measured profiles or public spec sheets, and their links, as
 * the plain structs scheduler/ plans over. Errors name the entry. */
typedef struct {
    char name[PLAN_NAME_MAX];
    plan_fleet fleet;                   /* nodes in file order */
    char (*site)[PLAN_NAME_MAX];        /* [nnodes]: each node's site, "" if none */
    int margin_permille;                /* memory kept free on every node */
} fleet_file;
cost_shape fleet_shape(const llama_config *cfg, int64_t seq);
/* devices: configs/devices.json, or NULL for the fleet's "devices" key, else
 * devices.json in the folder above the fleet file. Spec-sheet nodes are
 * estimated at the shape and micro-batch size. */
/* A profile written by `shardnode profile`, checked against the shape. */
int fleet_profile_parse(struct json_t *pj, const cost_shape *shape, cost_profile *pf,
                        const char *where, char *err, size_t errlen);
int fleet_load(fleet_file *ff, const char *path, const char *devices, const cost_shape *shape,
               int64_t micro_batch, char *err, size_t errlen);
void fleet_free(fleet_file *ff);

/* ---- chain.c: the stages of a split plan run in one process -------------
 * Activations flow forward and gradients backward between neighbouring
 * stages exactly as the pipeline will pass them over the wire. */
typedef struct {
    llama_config cfg;
    split_plan plan;
    stage *stages[SPLIT_MAX_STAGES];
    int B, T;
} chain;

int chain_create(chain *c, const llama_config *cfg, const split_plan *plan, int B, int T,
                 char *err, size_t errlen);
void chain_free(chain *c);
/* One micro-batch forward and backward; gradients accumulate. loss_scale as
 * in stage_backward (1 / kept targets of the whole batch); 0 means 1 / kept
 * targets of this micro-batch, which then must have one. Fills the sum of
 * the kept targets' losses and their count. */
int chain_forward_backward(chain *c, const int32_t *ids, const int32_t *labels,
                           float loss_scale, double *loss_sum, int *kept, char *err,
                           size_t errlen);
/* Forward only (validation): the loss sum and count of kept targets. */
int chain_forward(chain *c, const int32_t *ids, const int32_t *labels, double *loss_sum,
                  int *kept, char *err, size_t errlen);
/* Adds the gradient of a tied weight held by several stages into every
 * copy, so each copy holds the gradient of the shared parameter. */
void chain_sum_tied_grads(chain *c);
/* Global-norm clipping across stages followed by AdamW in every stage;
 * returns the gradient norm before clipping. */
double chain_adamw_step(chain *c, const stage_adamw *opt, int t, double max_norm);

/* ---- job.c: the job spec (docs/FORMATS.md) ------------------------------ */
typedef struct {
    char *path, *text;           /* the job file and its JSON text */
    char *config, *init_weights, *tokenizer, *out_dir;   /* resolved paths */
    char **data_files;
    int ndata;
    data_format format;
    char *separator, *prompt_template;
    double val_fraction;
    int seq_len, batch, micro_batch;
    long steps, warmup_steps, val_interval, checkpoint_interval, log_interval;
    int val_batches, threads;
    double lr, min_lr, weight_decay, beta1, beta2, eps, grad_clip;
    uint64_t seed;
} job_spec;

int job_load(job_spec *j, const char *path, char *err, size_t errlen);
/* Parses job text; path names it in messages and anchors relative paths. */
int job_parse(job_spec *j, const char *path, const char *text, char *err, size_t errlen);
/* 0 if both jobs compute the same steps (seed, shapes, schedule, optimizer,
 * data layout); else -1 with the first difference in `what`. */
int job_compare(const job_spec *a, const job_spec *b, char *what, size_t len);
void job_free(job_spec *j);
/* Learning rate at a step (0-based): linear warm-up to lr over warmup_steps,
 * then cosine decay to min_lr at the last step. A pure function of the
 * step, so a resumed run follows the same schedule. */
double job_lr(const job_spec *j, long step);

/* ---- checkpoint.c: weights, AdamW moments, step, config, job ------------ */
/* Writes the chain's state after `step` completed steps (atomic_file). */
int checkpoint_save(const char *path, chain *c, long step, const char *job_text, char *err,
                    size_t errlen);
/* Restores a checkpoint into a chain of the same model config (a different
 * config is refused, naming the first field that differs). */
int checkpoint_load(const char *path, chain *c, const job_spec *job, long *step, char *err,
                    size_t errlen);
/* Writes the weights alone under their HF names (model.safetensors). */
int checkpoint_export(const char *path, chain *c, char *err, size_t errlen);
void checkpoint_config_string(const llama_config *c, char *buf, size_t len);

/* ---- cluster.c: the static cluster file (docs/FORMATS.md) ---------------- */
typedef struct {
    char name[MESH_NAME_MAX];
    char host[256];
    int port;
    int begin, end;            /* layers [begin, end) */
} cluster_node;

typedef struct {
    char run[MESH_TEXT_MAX];   /* run name ("" = derived from the job) */
    int nnodes;
    cluster_node nodes[SPLIT_MAX_STAGES];   /* stage order */
    sched_policy policy;
    mesh_dtype wire;           /* activations and gradients on the wire */
    int timeout_ms;
} cluster_spec;

/* Reads and validates a cluster file against a model of num_layers layers:
 * stages in list order, contiguous, covering every layer once. */
int cluster_load(cluster_spec *c, const char *path, int num_layers, char *err, size_t errlen);
int cluster_find(const cluster_spec *c, const char *name);

/* ---- engine.c: one pipeline stage of a cluster run ------------------------ */
/* Trains this node's stage of the cluster from step 0 to `stop`: the
 * schedule's forwards and backwards over the mesh, the tied-weight and
 * gradient-norm exchanges, AdamW, and the commit of every step. The first
 * stage reads the data (data may be NULL elsewhere). Writes metrics per step
 * and, at the end, OUT/stage-NAME.safetensors. */
int engine_train(const job_spec *job, const llama_config *cfg, data_set *data,
                 const cluster_spec *cl, int self, long stop, FILE *metrics, char *err,
                 size_t errlen);

/* ---- export_cmd.c / pool_fetch.c: one model from the stages ------------- */
/* Merges STAGE_DIR/stage-NAME.safetensors of the n stages into OUT
 * (model.safetensors, config.json, tokenizer.json), with the model config
 * and tokenizer the job file names. */
int export_merge(const char *job_path, const char *stage_dir, const char *const *names, int n,
                 const char *out, char *err, size_t errlen);
/* Gathers the stage files of the mesh's committed plan from their nodes
 * (FETCH over the overlay) into STATE/jobs/ID/gathered, then merges them
 * into out (NULL: the job's out_dir). */
int pool_export(const char *state, const char *out, char *err, size_t errlen);

/* ---- plan_svg.c: a plan drawn as a pipeline (standalone SVG) ---- */
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

/* ---- args.c: "--name value" and "--flag" options ---------------------- */
/* Formats a message into err (NUL-terminated, truncated to errlen); returns
 * -1 so a failing function can `return node_errf(...)`. */
int node_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
typedef struct {
    const char *name;      /* "--config" */
    const char **value;    /* set for options that take a value */
    bool *flag;            /* set for options without a value */
} args_option;

/* Fills the options from argv[first..argc); an unknown option, a missing
 * value or a stray word is an error naming it. */
int args_parse(int argc, char **argv, int first, const args_option *opts, int nopts,
               char *err, size_t errlen);
/* Parses an integer flag value within [min, max]. */
int args_int(const char *text, const char *name, long min, long max, long *out, char *err,
             size_t errlen);
/* Fails naming the first required option that is missing. */
int args_require(const args_option *opts, int nopts, const char *const *required,
                 char *err, size_t errlen);

#endif

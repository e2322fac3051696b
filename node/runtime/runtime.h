/* runtime.h — the training runtime (node/runtime/): this machine's devices,
 * fleet files, the job spec, the stages of a split plan in one process
 * (chain), checkpoints, the static cluster file, the pipeline engine and the
 * merge of stage files into one model. It knows nothing of the daemon or the
 * pool: its files include node_base.h and the project's lower layers only. */
#ifndef SHARDNODE_RUNTIME_H
#define SHARDNODE_RUNTIME_H

#include "mesh.h"
#include "model.h"
#include "scheduler.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

struct json_t;

/* ---- devices.c: what this build can compute on (node.json "devices") ----
 * The CPU always; the GPUs a GPU backend of this build can open (kernels.h,
 * kdev_list). */
#define DEVICES_MAX_GPUS 16
typedef struct {
    char device[16];           /* its name for --device: "cuda:0", "hip:1" */
    char vendor[16];           /* "nvidia", "amd" */
    char name[128];
    int64_t memory_bytes, memory_free_bytes;
    char arch[32];             /* compute capability "sm_90" or gfx arch "gfx90a" */
    char driver[32];           /* the driver's version, "13.0" */
} devices_gpu;

typedef struct {
    char cpu_model[128];       /* /proc/cpuinfo's name for it; "unknown" if none */
    int cpu_cores;             /* the CPUs this process may use (node_usable_cpus) */
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
/* The devices record as gossip carries it: at most size - 1 bytes of compact
 * JSON, NUL-terminated. The whole record where it fits; else every GPU as
 * {"device", "name", "memory_bytes"} alone, as many as fit in order, and
 * "gpus_more": how many were left out (a machine of 8 or 16 GPUs). 0, or
 * -1 when even the CPU's part does not fit (out is then ""). */
int devices_gossip_text(struct json_t *devices, char *out, size_t size);

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
/* The same with LoRA adapters on every stage (lora NULL: chain_create). */
int chain_create_lora(chain *c, const llama_config *cfg, const split_plan *plan, int B, int T,
                      const stage_lora *lora, char *err, size_t errlen);
/* The same on a device (NULL: the CPU): every stage on dev. */
int chain_create_on(chain *c, const llama_config *cfg, const split_plan *plan, int B, int T,
                    const stage_lora *lora, struct kdev *dev, char *err, size_t errlen);
void chain_free(chain *c);
/* Every stage's parameters, gradients and moments to their host copies
 * (stage_pull) and back (stage_push); waits for the queued work (sync).
 * No-ops on the CPU; 0, or -1 with the device's error. */
int chain_pull(chain *c, char *err, size_t errlen);
int chain_push(chain *c, char *err, size_t errlen);
int chain_sync(chain *c, char *err, size_t errlen);
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
    long snapshot_every;         /* a pool run's bound on the steps a loss redoes: its stage
                                    snapshots come every job_snapshot_interval of it (0: the
                                    plan chooses) */
    long checkpoint_every;       /* a pool run's checkpoints of every stage (0: none) */
    double replan_gain;          /* a pool run switches to a plan predicted this much
                                    faster (share of the step; default 0.10) */
    long replan_min_steps;       /* ... at most once per this many steps, unless a member
                                    is lost (default 20) */
    int val_batches, threads;
    bool bf16;                   /* "precision": "bf16": matrix products in bf16 with fp32
                                    accumulation on a device that has them (the CPU and
                                    fp32 stay fp32); default "fp32" */
    double lr, min_lr, weight_decay, beta1, beta2, eps, grad_clip;
    uint64_t seed;
    /* "base": {"model": DIR, "quant": "nf4" | "none"}: start from an HF
     * directory (config defaults to DIR/config.json); nf4 needs lora */
    char *base_model;            /* resolved, or NULL */
    bool base_nf4;
    /* "lora": {"r", "alpha", "dropout", "target_modules", "use_rslora"}:
     * the base is frozen and only the adapters train (lora.nf4 = base_nf4) */
    bool has_lora;
    stage_lora lora;
    double lora_dropout;         /* 0, the only value accepted for now */
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
/* The adapter config of a job with "lora" (stage_create_lora), else NULL. */
const stage_lora *job_lora(const job_spec *j);
/* A stage's starting weights for job j: "base.model" (only the stage's own
 * tensors, config checked against cfg), else "init_weights", else the
 * seeded initialisation; then, with "lora", the adapters' initialisation.
 * A resumed run calls it too (the checkpoint holds only the adapters of a
 * frozen base) and then loads the checkpoint over it. */
int job_init_stage(const job_spec *j, const llama_config *cfg, stage *s, char *err,
                   size_t errlen);

/* ---- checkpoint.c: weights, AdamW moments, step, config, job ------------ */
/* Writes the chain's state after `step` completed steps (atomic_file). */
int checkpoint_save(const char *path, chain *c, long step, const char *job_text, char *err,
                    size_t errlen);
/* Restores a checkpoint into a chain of the same model config (a different
 * config is refused, naming the first field that differs). */
int checkpoint_load(const char *path, chain *c, const job_spec *job, long *step, char *err,
                    size_t errlen);
/* The same from several files of one step (the snapshots of other stages'
 * layer ranges, docs/ARCHITECTURE.md "Recovery"): each tensor from the
 * first file that holds it; one missing from all of them is named. */
int checkpoint_load_files(const char *const *paths, int n, chain *c, const job_spec *job,
                          long *step, char *err, size_t errlen);
/* What a stage of layers [begin, end) needs of checkpoint `path` (another
 * stage's snapshot, docs/ARCHITECTURE.md "Planned switches"; the tensors
 * stage_tensor_needed names, the model's layers and tied head from the
 * file's "config"): the byte ranges of their data in the file (pairs of
 * begin, end offsets in *ranges, malloc'd, ascending, adjacent ones merged;
 * *bytes in all). Only the header is read: the rest of the file may be a
 * hole still (a ranged fetch). Returns the number of ranges, -1 on error. */
int checkpoint_layer_ranges(const char *path, int begin, int end, uint64_t **ranges,
                            int64_t *bytes, char *err, size_t errlen);
/* Writes dst (atomic_file): those tensors of src, with its metadata: the
 * snapshot of layers [begin, end) that src's stage would have written. */
int checkpoint_copy_layers(const char *src, const char *dst, int begin, int end, char *err,
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
typedef struct {
    long stop;              /* run until this many steps are done (<= the job's steps) */
    const char *resume;     /* a state saved by a stage of the same layers (checkpoint_save
                             * of this stage alone): start after its step; NULL: step 0 */
    const char *checkpoint; /* where the stage's state goes when the run stops before the
                             * job's last step, and every checkpoint_interval steps; NULL:
                             * nowhere */
    const volatile sig_atomic_t *stop_request; /* when it becomes non-zero (a signal
                             * handler), the whole pipeline stops at the next step boundary:
                             * every stage after the same step */
    const volatile sig_atomic_t *threads_request; /* when it holds n > 0 (a signal
                             * handler), the stage computes with n threads from the next
                             * step on, at most the threads it started with (its scratch
                             * is sized for those); NULL: fixed */
    struct kdev *device;    /* where the stage computes (kernels.h); NULL: the CPU */
    long stopped_at;        /* out: steps done when engine_train returned 0 */
    /* A pool run's recovery (docs/ARCHITECTURE.md, "Recovery"): */
    const char *snapshot_dir; /* every job_snapshot_interval(snapshot_every) steps (before
                             * the last), the stage's state into
                             * DIR/L<begin>-<end>-s<step>.safetensors (older ones of its
                             * layers removed once superseded: snapshot_superseded); NULL:
                             * none */
    long snapshot_every;
    long checkpoint_every;  /* ... and at every multiple of this (a pool checkpoint's step) */
    bool wait_copies;       /* a pool's stage: the step that completes a multiple n of the
                             * interval h waits until DIR/copied-L<begin>-<end> (the pool's
                             * daemon writes it) says another member holds the snapshot of
                             * n - h, when this run wrote it, or "none": so a loss redoes at
                             * most 2h - 1 <= snapshot_every steps (docs/ARCHITECTURE.md,
                             * "Recovery"), for at most ENGINE_COPY_WAIT_MS, then goes on,
                             * saying so */
    const char *const *resume_files; /* instead of resume: the stage's state from these
                             * snapshots of one step (any layer ranges that cover it) */
    int nresume_files;
} engine_options;
#define ENGINE_COPY_WAIT_MS 30000 /* the longest wait for a copy (wait_copies) */
/* The steps between a pool stage's snapshots for a job's snapshot_every N,
 * the most steps a loss may redo: ceil(N / 2) (docs/ARCHITECTURE.md,
 * "Recovery"); 0 for none. */
static inline long job_snapshot_interval(long every) { return every > 0 ? (every + 1) / 2 : 0; }
/* Whether the snapshot of `step` of a layer range may be removed, given the
 * steps held of that range (steps[0..n)): when two of them newer than it
 * are at multiples of the interval h (every <= 0: any two) and it is not the
 * newest at a multiple of ckpt_every (a pool checkpoint's step, which its
 * submitter copies). A snapshot between the regular ones (a checkpoint's)
 * never pushes out one a buddy's copy may be paired with, and a range no
 * run writes any more (a recovered plan cut the layers otherwise) keeps
 * its snapshots: a second loss may resume from them. */
bool snapshot_superseded(const long *steps, int n, long step, long h, long ckpt_every);
/* Trains this node's stage of the cluster up to opt->stop: the schedule's
 * forwards and backwards over the mesh, the tied-weight and gradient-norm
 * exchanges, AdamW, and the commit of every step. The first stage reads the
 * data (data may be NULL elsewhere). Writes metrics per step and, at the
 * end, OUT/stage-NAME.safetensors (also when stopped early). Returns 0 with
 * opt->stopped_at the number of steps done (opt->stop, or the boundary at
 * which a stage asked the pipeline to stop). */
int engine_train(const job_spec *job, const llama_config *cfg, data_set *data,
                 const cluster_spec *cl, int self, engine_options *opt, FILE *metrics, char *err,
                 size_t errlen);

/* ---- export_merge.c: one model from the stages ------------------------- */
/* Merges STAGE_DIR/stage-NAME.safetensors of the n stages into OUT
 * (model.safetensors, config.json, tokenizer.json), with the model config
 * and tokenizer the job file names. */
int export_merge(const char *job_path, const char *stage_dir, const char *const *names, int n,
                 const char *out, char *err, size_t errlen);
/* (A job with "lora" gets peft_export's adapter directory instead.) */

/* ---- peft.c: a LoRA job's adapters as Hugging Face PEFT reads them ------
 * peft_export reads every adapter of the model from STAGE_DIR: the stage
 * files stage-NAME.safetensors of the nstages names, or with nstages 0 a
 * single process's adapter_model.safetensors. Into OUT (created): a PEFT
 * adapter directory (adapter_model.safetensors under PEFT's names,
 * adapter_config.json, tokenizer.json) or, with merge, a whole HF model
 * (model.safetensors with W0 + scaling B A for every targeted projection,
 * W0 of an NF4 base dequantized; config.json, tokenizer.json and the
 * base's tokenizer_config.json when it has one). The merge builds the
 * whole model's base as the job does (job_init_stage). */
int peft_export(const job_spec *j, const llama_config *cfg, const char *stage_dir,
                const char *const *names, int nstages, const char *out, bool merge, char *err,
                size_t errlen);
/* adapter_config.json of job j: LoraConfig's fields as PEFT 0.13 saves
 * them (peft_type LORA, task_type CAUSAL_LM, r, lora_alpha, lora_dropout,
 * target_modules, use_rslora, bias none, fan_in_fan_out false,
 * inference_mode true, base_model_name_or_path the base model's path). */
int peft_config_write(const char *path, const job_spec *j, char *err, size_t errlen);
/* Reads a PEFT adapter_config.json into a stage_lora (nf4 false): plain
 * LoRA only (no DoRA, rank or alpha patterns, layers_to_transform,
 * modules_to_save, fan_in_fan_out or bias), target_modules of a LLaMA's
 * projections or "all-linear"; err names the file and the key. */
int peft_config_read(const char *path, stage_lora *out, char *err, size_t errlen);

#endif

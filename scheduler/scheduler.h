/* scheduler.h — pure functions from data to data: how a model is cut into
 * pipeline stages (and, to come, the cost model, the planner and the
 * pipeline schedule). Nothing here does I/O, threads or math on tensors.
 * scheduler/ may include only the C library. */
#ifndef SHARDNODE_SCHEDULER_H
#define SHARDNODE_SCHEDULER_H

#include <stddef.h>

/* A chain of stages over a model of num_layers layers: stage i holds layers
 * [begin[i], end[i]); stage 0 also holds the embedding, the last stage the
 * final norm, head and loss. */
#define SPLIT_MAX_STAGES 256
typedef struct {
    int nstages;
    int begin[SPLIT_MAX_STAGES];
    int end[SPLIT_MAX_STAGES];
} split_plan;

/* Parses "L1,L2,..." — cut points, strictly increasing integers in
 * [0, num_layers] — into a chain of stages. NULL or "" gives one stage.
 * A cut at 0 makes an embedding-only first stage; a cut at num_layers a
 * head-only last stage. Returns 0, or -1 with a message naming the flag. */
int split_parse(split_plan *plan, const char *spec, int num_layers, const char *flag,
                char *err, size_t errlen);

/* ---- pipeline schedule (schedule.c) ----------------------------------
 * The order in which one stage runs the forwards and backwards of a step's
 * micro-batches, as data that node/ executes. */
typedef enum { SCHED_FORWARD = 0, SCHED_BACKWARD = 1 } sched_kind;
typedef struct {
    sched_kind kind;
    int micro;
} sched_op;
typedef enum { SCHED_1F1B = 0, SCHED_GPIPE = 1 } sched_policy;

/* Fills ops[0 .. 2m) for stage s of p stages and m micro-batches.
 * 1F1B: min(p - s - 1, m) forwards to fill the pipe, then one forward and
 * one backward in turn, then the remaining backwards: at most p - s
 * micro-batches in flight on stage s. GPipe: all forwards, then all
 * backwards: m in flight. Micro-batches run in order in each direction.
 * Returns 2m, or -1 if the arguments make no schedule. */
int sched_build(sched_policy policy, int p, int s, int m, sched_op *ops);
/* The most micro-batches forwarded and not yet backwarded at any point. */
int sched_max_in_flight(const sched_op *ops, int n);

/* BEGIN planner section (owned by cost.c, plan.c, plan_search.c, simulate.c)
 * The cost model, the planner and the 1F1B simulator. Every figure is an
 * integer — nanoseconds, bytes, bytes per second — and every operation on
 * them is integer arithmetic: in a leaderless pool every node computes the
 * plan itself, and floating point (FMA contraction, libm) could differ
 * between two CPUs and split the pool. */

#include <stdbool.h>
#include <stdint.h>

/* ---- cost model (cost.c) ------------------------------------------------ */

/* The parts a stage can hold: stage 0 the embedding, every stage a run of
 * decoder layers, the last stage the final norm, LM head and loss. */
enum { COST_EMBED = 0, COST_LAYER = 1, COST_HEAD = 2, COST_UNITS = 3 };

/* The projections LoRA can adapt, in model/'s order (stage_lora's
 * STAGE_LORA_Q...; tests/unit/test_cost_lora.c checks they agree). */
enum { COST_LORA_Q, COST_LORA_K, COST_LORA_V, COST_LORA_O, COST_LORA_GATE, COST_LORA_UP,
       COST_LORA_DOWN, COST_LORA_MODULES };

typedef struct {
    int layers;                                 /* L */
    int64_t hidden, intermediate, heads, kv_heads, vocab;
    int64_t seq;                                /* T: tokens per sequence */
    bool tied;                                  /* the head shares the embedding */
    /* The job's kind of training (its "lora" and "base" keys). lora_r 0:
     * full fine-tuning (the zero value). Else only adapters of rank lora_r
     * on the projections of lora_modules (bit COST_LORA_Q...) train; the
     * base is frozen in fp32, or with nf4 its layer matrices in NF4. */
    int64_t lora_r;
    unsigned lora_modules;
    bool nf4;
} cost_shape;

/* Bytes of a model at micro-batch size b, as model/stage.c lays a stage out
 * (fp32 weights, gradients and both AdamW moments; the activation arena).
 * With LoRA as model/stage_lora.c does: weight is the frozen base (fp32, or
 * the layer matrices in NF4) plus the adapters, grad and moments the
 * adapters' alone (fp32), act adds the adapters' saved x A^T, and every
 * stage has the adapters' work rows and, with NF4, a tile per scratch slot. */
typedef struct {
    int64_t params[COST_UNITS];                 /* parameters of one unit (the model's) */
    int64_t trainable[COST_UNITS];              /* those AdamW updates: params, or the adapters */
    int64_t frozen[COST_UNITS];                 /* bytes of weight that never train (LoRA) */
    int64_t weight[COST_UNITS], grad[COST_UNITS], moments[COST_UNITS];
    int64_t act[COST_UNITS];                    /* kept per in-flight micro-batch */
    int64_t head_state_tied_first;  /* head's weights+grads+moments on a stage that also
                                       holds the tied embedding (the norm, plus a gradient
                                       buffer for the head apart) */
    int64_t slot;             /* per in-flight micro-batch on any stage: output, ids, labels */
    int64_t stage;            /* once per stage: input-gradient buffers, RoPE tables */
    int64_t layer_work;       /* once per stage holding layers: backward scratch */
    int64_t att_scratch;      /* per attention scratch slot of a stage holding layers */
    int64_t stage_scratch;    /* per scratch slot on any stage: NF4 products' tiles (LoRA) */
    int64_t boundary;         /* activations (or their gradient) crossing one cut */
} cost_bytes;

/* wire_bytes: 4 (fp32) or 2 (bf16) per element on the wire. Fails when the
 * shape is not positive, its LoRA settings are out of range (r in
 * [1, 65536], modules some of the seven, NF4 only with LoRA) or its figures
 * do not fit the arithmetic. */
int cost_bytes_compute(cost_bytes *out, const cost_shape *shape, int64_t micro_batch,
                       int wire_bytes, char *err, size_t errlen);
/* bitsandbytes' NF4 of a [rows, cols] matrix as kernels/ stores it
 * (nf4_bytes): 4-bit codes, an 8-bit absmax per 64 values, an fp32 nested
 * absmax per 256 blocks, the offset and both maps. 0 for a bad shape. */
int64_t cost_nf4_bytes(int64_t rows, int64_t cols);
/* Floats of one thread's tile scratch for NF4 products of N rows through a
 * [OC, IC] matrix (nf4_matmul_scratch_floats). */
int64_t cost_nf4_scratch_floats(int64_t N, int64_t IC, int64_t OC);

/* What one device does at one micro-batch shape: measured by `shardnode
 * profile`, or estimated from a spec sheet (cost_profile_from_spec). */
typedef struct {
    int64_t micro_batch;                        /* B the times were taken at */
    int64_t fwd_ns[COST_UNITS], bwd_ns[COST_UNITS];   /* one unit, one micro-batch */
    int64_t opt_ns[COST_UNITS];                 /* AdamW update of one unit */
    int64_t memory_bytes;                       /* usable memory */
    int scratch_slots;                          /* attention scratch buffers (CPU: threads) */
} cost_profile;

/* A profile times full fine-tuning, whatever the job: `shardnode profile`
 * measures it and a spec sheet is modelled for it. A LoRA job's step is
 * derived from it (LoRA shapes; a full fine-tuning shape copies pf):
 *   forward   x (2M + 4CT + 2A) / (2M + 4CT)   per layer, per token: M the
 *             layer's matrix parameters, A its adapters' (r (in + out) per
 *             module), 4CT the attention's scores and values; NF4 products
 *             cost what fp32 ones do (bench_nf4: 0.87-1.13x);
 *   backward  x (2M + 8CT + 4A) / (4M + 8CT)   no weight-gradient products
 *             for the frozen base, the adapters' four small ones;
 *             the head's backward halved (no LM head gradient), the
 *             embedding's none;
 *   AdamW     x A / P per layer (P the layer's parameters), none for the
 *             embedding and the head.
 * Matrix products dominate a step; the norms' and activations' elementwise
 * work is scaled with them. Integer arithmetic, rounded down. */
void cost_profile_for_shape(cost_profile *out, const cost_profile *pf, const cost_shape *shape);

/* A public spec sheet (configs/devices.json), in integers. */
typedef struct {
    int64_t gflops;          /* peak of the precision training uses, GFLOP/s */
    int64_t mfu_permille;    /* share of that peak the matrix products reach */
    int64_t memory_bytes;    /* usable: memory minus the runtime's reserve */
    int64_t mem_bandwidth;   /* bytes per second */
    int64_t weight_bytes;    /* bytes per weight read by the compute (2 bf16, 4 fp32) */
    int scratch_slots;
} cost_spec;

/* Times of a roofline: matrix products at mfu of peak plus one pass over
 * the weights and activations at memory bandwidth; backward twice the
 * forward; AdamW reads 16 and writes 12 bytes per parameter. Full
 * fine-tuning's, like a measured profile, whatever shape's LoRA settings. */
int cost_profile_from_spec(cost_profile *out, const cost_spec *spec, const cost_shape *shape,
                           int64_t micro_batch, char *err, size_t errlen);

typedef struct {
    int64_t latency_ns;
    int64_t bandwidth;                          /* bytes per second, > 0 */
} cost_link;

/* latency + bytes / bandwidth, rounded up. */
int64_t cost_transfer_ns(const cost_link *l, int64_t bytes);
/* A unit's time at micro-batch b from its time at B: linear, rounded to
 * nearest (the planner's only model of other micro-batch sizes). */
int64_t cost_scale(int64_t ns, int64_t b, int64_t B);
/* floor(a * b / c) exactly (128-bit intermediate), INT64_MAX on overflow. */
int64_t cost_muldiv(int64_t a, int64_t b, int64_t c);
/* Memory of a stage holding the embedding or not, `layers` decoder layers,
 * the head or not, with `in_flight` micro-batches' activations kept. */
int64_t cost_stage_memory(const cost_bytes *cb, bool tied, int scratch_slots, bool embed,
                          int64_t layers, bool head, int64_t in_flight);

/* "1.50 GiB", "12.0 MiB", "512 bytes": sizes in messages. */
void cost_format_bytes(char *buf, size_t len, int64_t bytes);

/* Link measurement: echo probes of `bytes` each way and their round trips.
 * Latency from the smallest probes, bandwidth from the difference between
 * the largest and the smallest (medians). The mesh sends the probes. */
typedef struct {
    int64_t bytes;
    int64_t rtt_ns;
} cost_probe;
int cost_link_estimate(cost_link *out, const cost_probe *probes, int n, char *err,
                       size_t errlen);

/* ---- fleets, jobs and plans (plan.c) ------------------------------------ */

#define PLAN_NAME_MAX 64
#define PLAN_MAX_STAGES SPLIT_MAX_STAGES
/* Devices sharing one stage's micro-batches (data parallel across unequal
 * devices, as Zorse and Metis do): room for a later issue; 1 today. */
#define PLAN_MAX_GROUP 8
#define PLAN_EXACT_MAX_NODES 8         /* exact search up to here, heuristic above */
#define PLAN_EXHAUSTIVE_MAX_NODES 10
#define PLAN_MAX_NODES 1024

typedef struct {
    char name[PLAN_NAME_MAX];      /* unique: the total order that breaks ties */
    char device[PLAN_NAME_MAX];    /* for reports only */
    cost_profile prof;
    bool no_data;                  /* lacks the job's tokenizer or data files, so it cannot
                                      be the first stage (which reads the data); false,
                                      the zero value: any stage */
} plan_node;

typedef struct {
    int nnodes;
    plan_node *nodes;
    cost_link *links;              /* [nnodes * nnodes]: links[i*n + j] carries i to j */
} plan_fleet;

typedef struct {
    cost_shape shape;
    int64_t batch;                 /* sequences per step */
    int64_t max_micro_batch;       /* micro-batch sizes b | batch, b <= this, are tried */
    int64_t min_micro_batch;       /* ... and b >= this (0: 1); equal to max pins the size
                                      (a pool job keeps its micro_batch: the same sums
                                      as one process) */
    int wire_bytes;                /* 4 fp32, 2 bf16 */
    int margin_permille;           /* memory kept free on every node */
    int64_t search_budget;         /* orders the heuristic's local search may try from
                                      each start; 0: PLAN_SEARCH_BUDGET. A count, not a
                                      clock, so every node stops at the same plan */
} plan_job;
#define PLAN_SEARCH_BUDGET 150000

typedef struct {
    int ndevices;                  /* 1 (see PLAN_MAX_GROUP) */
    int node[PLAN_MAX_GROUP];      /* indices into the fleet */
    int layer_begin, layer_end;    /* decoder layers [begin, end) */
    bool embed, head;              /* the first stage holds the embedding, the last the head */
    /* filled by cost_evaluate: */
    int64_t fwd_ns, bwd_ns;        /* one micro-batch */
    int64_t send_ns, recv_ns;      /* activations to the next stage, gradient back */
    int64_t time_ns;               /* t_s = fwd + bwd + send + recv */
    int64_t opt_ns;                /* AdamW of the stage, once per step */
    int64_t in_flight;             /* micro-batches whose activations are kept: min(p - s, m) */
    int64_t memory_bytes, memory_limit;
} plan_stage;

typedef struct {
    int nstages;
    int64_t micro_batches, micro_batch;   /* m and b: m * b = batch */
    plan_stage stage[PLAN_MAX_STAGES];
    /* filled by cost_evaluate: */
    int64_t pipeline_ns;           /* (m - 1) * max_s t_s + sum_s t_s */
    int64_t optimizer_ns;          /* max_s opt_s: clipping needs every gradient first */
    int64_t step_ns;               /* pipeline + optimizer */
    int bottleneck;                /* stage with the largest t_s (first of equals) */
    int64_t bubble_ppm;            /* idle share of p * pipeline, parts per million */
} plan;

/* Validates a plan's structure against fleet and job and fills the times,
 * memory and step of every stage. Returns 0; -1 when the plan is malformed
 * (a no_data node as the first stage included) or a node is over its memory
 * limit (usable minus the margin), with a message naming the node and the
 * bytes missing. err may be NULL (search). */
int cost_evaluate(plan *p, const plan_fleet *f, const plan_job *job, char *err,
                  size_t errlen);

typedef enum {
    PLAN_AUTO = 0,          /* exact up to PLAN_EXACT_MAX_NODES, heuristic above */
    PLAN_EXACT = 1,         /* every order of every subset, skipping orders a bound
                               proves cannot win; the exact split of each order */
    PLAN_HEURISTIC = 2,     /* link-following chains, then a local search */
    PLAN_EXHAUSTIVE = 3,    /* every order of every subset, solved: the reference */
} plan_method;

typedef struct {
    plan_method method;            /* what ran */
    int64_t orders;                /* orders of nodes solved */
} plan_stats;

/* Chooses nodes, their order, contiguous layer ranges and the micro-batch
 * count minimising cost_evaluate's step_ns within memory: exact up to
 * PLAN_EXACT_MAX_NODES nodes (equal to PLAN_EXHAUSTIVE), a heuristic above.
 * Deterministic: nodes are taken in the order of their names, so the
 * listing order does not matter; equal costs go to the first plan found in
 * that order; the heuristic stops after a count of orders, not a time. The
 * plan's node indices refer to f. A no_data node is never the first stage.
 * Fails, saying how much memory is missing and where, when no plan fits, or
 * that no node holding the job's data can be the first stage when that rule
 * is what leaves no plan. */
int plan_compute(plan *out, const plan_fleet *f, const plan_job *job, plan_method method,
                 plan_stats *stats, char *err, size_t errlen);
/* The Megatron/DeepSpeed default: nodes order[0..n) each holding L/n layers
 * (the first L mod n one more), with the best micro-batch count that fits.
 * Refuses an order whose first node is no_data, naming it. */
int plan_uniform(plan *out, const plan_fleet *f, const plan_job *job, const int *order, int n,
                 char *err, size_t errlen);
/* FNV-1a over the node names, layer ranges and micro-batching. */
uint64_t plan_hash(const plan *p, const plan_fleet *f);
/* The chain of stages node/ runs (begin and end layer per stage). */
void plan_to_split(const plan *p, split_plan *out);
/* Checks the fleet: names unique and non-empty, links positive, figures
 * within the integer arithmetic's range. Names the entry at fault. */
int plan_fleet_check(const plan_fleet *f, char *err, size_t errlen);

/* ---- discrete-event simulator of 1F1B (simulate.c) ---------------------- */

typedef struct {
    int64_t pipeline_ns;           /* last backward of the step ends */
    int64_t step_ns;               /* plus the optimizer */
    int64_t bubble_ppm;            /* idle share of p * pipeline */
    int64_t events;                /* forwards and backwards replayed */
} sim_result;

/* Replays the 1F1B schedule (sched_build) of a plan filled by cost_evaluate
 * micro-batch by micro-batch: each stage runs its ops in order, a forward
 * waits for the previous stage's activations, a backward for the next
 * stage's gradient; the transfers over the link between s and s + 1 occupy
 * stage s, as the cost model counts them. */
int sim_run(sim_result *out, const plan *p, char *err, size_t errlen);

/* Where a stage runs: stages with the same host share that machine's cores. */
typedef struct {
    int host;                      /* index into the machines' core counts */
    int threads;                   /* the threads the stage computes with (its profile's) */
} sim_placement;

/* The same replay with stages that share machines: while the threads of the
 * ops running at once on a machine exceed its cores, each of them runs at
 * cores / threads of its profiled speed (the kernel shares the cores evenly);
 * a stage waiting for its input takes no core (idle OpenMP threads sleep).
 * The optimizer of every stage runs at once after the last backward, shared
 * alike. With every stage alone on its machine it equals sim_run. place has
 * one entry per stage; host_cores one per machine. */
int sim_run_shared(sim_result *out, const plan *p, const sim_placement *place,
                   const int *host_cores, int nhosts, char *err, size_t errlen);

/* END planner section */


/* BEGIN election section (elect.c)
 * Leaderless plan election (docs/PROTOCOL.md, "Plan election"). Every
 * member computes a plan from its view of the pool and gossips a vote
 * (epoch, base, view hash, plan hash, the nodes the plan names). Votes are
 * never changed within an epoch. The outcome of an epoch is a pure function
 * of the votes cast in it, so every member that sees them decides the same:
 *   committed  a plan whose every named node, and a strict majority of the
 *              base membership M (the voters of the last committed plan, or
 *              the job's pool before any), voted for it;
 *   failed     no plan can commit any more: every plan voted for has a named
 *              node that voted otherwise, or too few of M left to reach a
 *              majority; and the members of M that have not voted are not a
 *              majority themselves;
 *   open       otherwise (wait for more votes). */

#define ELECT_MAX_NAMED 64

typedef struct {
    int64_t epoch;                 /* the epoch voted in; 0: no vote */
    int64_t base;                  /* epoch of the last commit it builds on; 0: none */
    uint64_t base_plan;            /* that commit's plan hash; 0 with base 0 */
    uint64_t view, plan;           /* plan 0: no plan fits the voter's view */
    int nnamed;                    /* the nodes the plan names */
    char named[ELECT_MAX_NAMED][PLAN_NAME_MAX];
} elect_vote;

typedef struct {
    const char *name;
    const elect_vote *vote;        /* NULL: this member has not voted at all */
    bool gone;                     /* dead or left in the deciding node's view: a
                                      plan naming it that it has not voted for in
                                      this epoch is blocked (the one place the
                                      outcome rests on the failure detector) */
} elect_voter;

typedef enum { ELECT_OPEN = 0, ELECT_COMMITTED = 1, ELECT_FAILED = 2 } elect_outcome;

typedef struct {
    elect_outcome outcome;
    const elect_vote *winner;      /* COMMITTED: one of the winning votes */
    int64_t base;                  /* learnt from a later vote (below): the base
                                      epoch that vote carried, else 0 */
    uint64_t base_plan;
    bool from_later;               /* decided by a vote at a later epoch */
    int votes, unvoted;            /* of M: voted in this epoch, not voted */
} elect_result;

/* The outcome of `epoch` given every member's current vote. members: M,
 * the base membership (names, any order, no duplicates). A vote at a later
 * epoch already decided this one: base >= epoch means committed (its
 * base_plan, winner NULL), base < epoch failed. Votes at earlier epochs
 * count as not voted. */
void elect_decide(int64_t epoch, const char *const *members, int nmembers,
                  const elect_voter *voters, int nvoters, elect_result *out);
/* FNV-1a 64 over bytes, chained from h (start with ELECT_HASH_INIT): the
 * view hash over a canonical text of the inputs. */
#define ELECT_HASH_INIT 14695981039346656037ull
uint64_t elect_hash(uint64_t h, const void *bytes, size_t n);

/* END election section */

#endif

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

#endif

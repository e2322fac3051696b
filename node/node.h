/* node.h — the shardnode program: one function per subcommand, plus the
 * argument parsing they share. node/ is the only place where scheduler/,
 * model/ and kernels/ (and, to come, mesh/ and keys/) meet.
 * Each command returns the process exit status and prints its own errors:
 * one line on stderr naming the file, tensor, key or flag at fault. */
#ifndef SHARDNODE_NODE_H
#define SHARDNODE_NODE_H

#include "model.h"
#include "scheduler.h"

#include <stdbool.h>
#include <stddef.h>

int cmd_gradcheck(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tokenizer(int argc, char **argv);   /* tokenizer_cmd.c */
int cmd_generate(int argc, char **argv);    /* generate_cmd.c */
int cmd_train(int argc, char **argv);       /* train.c */

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
 * in stage_backward; 0 means 1 / (kept targets of this micro-batch). Fills
 * *loss with the mean loss over kept targets of the micro-batch. */
int chain_forward_backward(chain *c, const int32_t *ids, const int32_t *labels,
                           float loss_scale, double *loss, int *kept, char *err,
                           size_t errlen);
/* Adds the gradient of a tied weight held by several stages into every
 * copy, so each copy holds the gradient of the shared parameter. */
void chain_sum_tied_grads(chain *c);
/* Global-norm clipping across stages followed by AdamW in every stage;
 * returns the gradient norm before clipping. */
double chain_adamw_step(chain *c, const stage_adamw *opt, int t, float max_norm);

/* ---- args.c: "--name value" and "--flag" options ---------------------- */
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

/* commands.h — the shardnode program (node/cmd/): one function per
 * subcommand, plus the argument parsing they share. The top room: it may
 * include every other room's public header (daemon.h, the pool's, runtime.h,
 * node_base.h). Each command returns the process exit status and prints its
 * own errors: one line on stderr naming the file, tensor, key or flag at
 * fault. The two commands the daemon spawns (probe-links, fetch) are the
 * daemon's (daemon.h). */
#ifndef SHARDNODE_COMMANDS_H
#define SHARDNODE_COMMANDS_H

#include <stdbool.h>
#include <stddef.h>

int cmd_gradcheck(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tokenizer(int argc, char **argv);   /* tokenizer_cmd.c */
int cmd_generate(int argc, char **argv);    /* generate_cmd.c */
int cmd_train(int argc, char **argv);       /* train.c */
int cmd_batches(int argc, char **argv);     /* train.c */
int cmd_export(int argc, char **argv);      /* export_cmd.c */
int cmd_import(int argc, char **argv);      /* import_cmd.c */
int cmd_plan(int argc, char **argv);        /* plan_cmd.c */
int cmd_profile(int argc, char **argv);     /* profile_cmd.c */
int cmd_link(int argc, char **argv);        /* link_cmd.c */
int cmd_init(int argc, char **argv);        /* init_cmd.c */
int cmd_invite(int argc, char **argv);      /* init_cmd.c */
int cmd_up(int argc, char **argv);          /* mesh_cmd.c */
int cmd_join(int argc, char **argv);        /* mesh_cmd.c */
int cmd_status(int argc, char **argv);      /* mesh_cmd.c */
int cmd_leave(int argc, char **argv);       /* mesh_cmd.c */
int cmd_set(int argc, char **argv);         /* mesh_cmd.c */
int cmd_demo(int argc, char **argv);        /* demo_cmd.c */
int cmd_devices(int argc, char **argv);     /* devices_cmd.c */

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

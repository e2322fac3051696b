/* demo_internal.h — private to demo_cmd.c (`shardnode demo`) and demo_ns.c
 * (its network namespaces): the demo's state, its fixed names and addresses,
 * and the helpers one file calls in the other. */
#ifndef SHARDNODE_NODE_DEMO_INTERNAL_H
#define SHARDNODE_NODE_DEMO_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define DEMO_NODES 3
#define DEMO_PATH 4096
#define DEMO_IFACES 8

extern const char *const demo_ns_hub;
extern const char *const demo_names[DEMO_NODES];
extern const char *const demo_ns[DEMO_NODES];
extern const char *const demo_ip[DEMO_NODES];

typedef struct {
    char exe[DEMO_PATH];                 /* this shardnode binary */
    char dir[DEMO_PATH];                 /* absolute --dir */
    char state[DEMO_NODES][DEMO_PATH];   /* DIR/a ... */
    char log[DEMO_NODES][DEMO_PATH];     /* DIR/a.log ... */
    pid_t node[DEMO_NODES];              /* node processes (each its own group); 0: none */
    int node_status[DEMO_NODES];         /* exit status once reaped */
    bool node_reaped[DEMO_NODES];
    bool ns_made;                        /* the namespaces may exist */
    char ifaces[DEMO_IFACES][32];        /* interface names seen in the namespaces */
    int nifaces;
} demo_t;

/* demo_cmd.c */
void demo_sleep_ms(long ms);
/* CLOCK_MONOTONIC in seconds. */
double demo_now_s(void);
/* Runs argv with exit code 0 required; err names the command. */
int demo_run_ok(char *const argv[], double timeout_s, char *err, size_t errlen);
/* Runs argv and collects its stdout (NUL-terminated, truncated to len);
 * returns the exit code or -1. */
int demo_run_capture(char *const argv[], char *out, size_t len, double timeout_s, char *err,
                     size_t errlen);

/* demo_ns.c */
/* Remembers an interface name whose UAPI socket cleanup may have to remove. */
void demo_add_iface(demo_t *d, const char *name);
/* Notes the wireguard-go interfaces in namespace ns. */
void demo_note_ifaces(demo_t *d, const char *ns);
bool demo_ns_exists(const char *ns);
/* Deletes the demo's namespaces (and kills what runs there); prints what it
 * did when loud. Returns the number of problems. */
int demo_ns_destroy(demo_t *d, bool loud);
/* The hub namespace with its bridge, and one namespace per node on it. */
int demo_ns_build(demo_t *d, char *err, size_t errlen);

#endif

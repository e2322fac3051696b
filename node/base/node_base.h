/* node_base.h — the small helpers every room of node/ shares (node/README.md,
 * "Rooms"): error formatting, hex, the state directory's JSON files, the
 * node name rule, path joining, wiping secrets and the usable CPUs. The bottom room: it
 * includes only the project's lower layers (model.h for atomic_file). */
#ifndef SHARDNODE_NODE_BASE_H
#define SHARDNODE_NODE_BASE_H

#include <stddef.h>
#include <stdint.h>

/* The longest path a state directory's file gets (STATE/name). */
#define NODE_PATH_MAX 4096

/* Formats a message into err (NUL-terminated, truncated to errlen); returns
 * -1 so a failing function can `return node_errf(...)`. */
int node_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

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

/* The node's name rule: 1..63 of A-Z a-z 0-9 . _ - */
int node_name_valid(const char *s);

/* DIR/NAME into out (NODE_PATH_MAX bytes); -1 when it does not fit. */
int node_state_path(char *out, const char *dir, const char *name);

/* The CPUs this process may use (node_cpus.c): its affinity mask's
 * (taskset, a container's cpuset), fewer where a CPU quota of its cgroup or
 * of one above it allows fewer (cgroup v2 cpu.max, v1 cpu.cfs_quota_us;
 * rounded up); at least 1. What a node gossips as its cores and computes
 * with when no --threads is given. */
int node_usable_cpus(void);
/* The CPUs a quota of `quota` us per `period` us allows, rounded up; 0 when
 * there is none (quota <= 0, as v1's -1). */
int node_cpu_quota_cpus(long long quota, long long period);
/* The same from a cgroup v2 cpu.max line: "max 100000" -> 0 (no quota),
 * "150000 100000" -> 2; -1 for any other text. */
int node_cpu_max_parse(const char *text);

/* Zeroes n bytes at p in a way the compiler keeps (private keys should not
 * outlive their use in memory). */
void node_wipe(void *p, size_t n);

#endif

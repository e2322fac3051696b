/* pool_job.h — node/pool/, public to the rooms above it: a job as the mesh
 * carries it (prefix pool_).
 *
 * `shardnode train --state DIR --job JOB.json` on one member makes a bundle
 * of the job; the bundle travels to every member in a gossip record; each
 * member checks that it has the same files (by SHA-256) and writes the job
 * with its own paths under DIR/jobs/ID/.
 *
 * A bundle is read in one place, pool_bundle_from_json, into a pool_bundle;
 * everything else works on that type (pool_bundle_to_json writes it back). */
#ifndef SHARDNODE_POOL_JOB_H
#define SHARDNODE_POOL_JOB_H

#include "mesh.h"
#include "runtime.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define POOL_JOB_ID_LEN 16             /* hex digits */
#define POOL_BUNDLE_MAX_BYTES 6000     /* compact JSON text: it travels in a gossip record */
/* A job's submitted_at may be ahead of the receiver's clock by this much at
 * most: a job from further in the future is ignored (until then). */
#define POOL_JOB_SKEW_S 120

/* One file a job reads, as its submitter has it. */
typedef struct {
    char role[16];                     /* "tokenizer", "weights", "data", "base" */
    char *path;                        /* absolute, on the submitter */
    char sha256[65];                   /* 64 lowercase hex digits */
    int64_t bytes;
} pool_file;

/* The bundle of a job file:
 *   {"v": 1, "id": ID,
 *    "job": <the job JSON object with every path made absolute>,
 *    "config": <the model config JSON object, inline>,
 *    "files": [{"role": "weights"|"tokenizer"|"data"|"base", "path": ABS, "sha256": HEX,
 *               "bytes": N}, ...],        (tokenizer, weights if any, data in order,
 *               then with "base": {"model"} the base model's config.json and weights:
 *               model.safetensors, or model.safetensors.index.json and its shards)
 *    "submitted_by": NAME, "submitted_at": unix seconds}.
 * The id is the first 16 hex digits of the SHA-256 of the compact, key-sorted
 * JSON of everything except "id" (submitted_at included: the order of jobs
 * cannot be changed without changing the job). The job and the config are
 * other modules' documents: job_parse and llama_config_load judge them, and
 * they travel here as JSON objects. */
typedef struct {
    char id[POOL_JOB_ID_LEN + 1];
    char submitted_by[MESH_NAME_MAX];
    int64_t submitted_at;
    char *out_dir;                     /* the job's out_dir: its submitter's */
    int nfiles;
    pool_file *files;
    int ndata;                         /* the job's data files, in order */
    char **data;                       /* (pointers into files[].path) */
    json_t *job, *config;              /* owned references */
} pool_bundle;

/* What a member lacks of a job's files. */
typedef struct {
    char role[16];
    char *path;                        /* as the bundle names it */
    char *local;                       /* where this member looked */
    char *why;                         /* "missing", "sha256 differs (...)", "unreadable (...)" */
} pool_lack;

typedef struct {
    int n;
    pool_lack *l;
} pool_lacks;

/* Makes the bundle of a job file. The job is validated with job_load and
 * the config with llama_config_load; the files are hashed as streams. Fails
 * naming the file that cannot be read, or when the bundle would exceed
 * POOL_BUNDLE_MAX_BYTES. NULL on failure. */
json_t *pool_bundle_make(const char *job_path, const char *submitter, int64_t now_s, char *err,
                         size_t errlen);

/* Reads and checks a bundle received from a peer: exactly the keys above
 * with their types, v 1, every path absolute, the files list matching the
 * job's paths role by role, the job valid (job_parse), the submitter a node
 * name, the compact text at most POOL_BUNDLE_MAX_BYTES, and the id that of
 * the content. Returns 0 with *out filled (pool_bundle_free it), or -1 with
 * the first fault (one line: no control byte of the peer's making) and *out
 * zero. */
int pool_bundle_from_json(json_t *j, pool_bundle *out, char *err, size_t errlen);
/* The bundle as it travels (a new object). */
json_t *pool_bundle_to_json(const pool_bundle *b);
int pool_bundle_copy(pool_bundle *dst, const pool_bundle *src);
void pool_bundle_free(pool_bundle *b);
/* pool_bundle_from_json without keeping the result. */
int pool_bundle_valid(json_t *bundle, char *err, size_t errlen);

/* Whether job bundle a (gossiped, valid) replaces b (this node's job, NULL:
 * none): a later submitted_at, ties broken by the larger id, so every
 * member orders any two jobs the same way; never one whose submitted_at is
 * more than POOL_JOB_SKEW_S after now_s (a job from the far future would
 * otherwise override every job submitted after it). */
bool pool_bundle_later(const pool_bundle *a, const pool_bundle *b, int64_t now_s);
/* The same on bundles as JSON (NULL b: none); an invalid a is never later. */
bool pool_job_later(json_t *a, json_t *b, int64_t now_s);

/* On this node: resolves each of the bundle's files (node.json's optional
 * "paths" object, node_paths, maps a file's base name such as "kjv.txt" to
 * a local path, relative paths against state_dir; otherwise the same
 * absolute path), hashes it and compares SHA-256. Writes
 * DIR/jobs/ID/config.json and DIR/jobs/ID/job.json: the bundle's job with
 * local paths, "config": that config.json, "out_dir": DIR/jobs/ID/out
 * (created). The base model's files are looked for in one directory, the
 * one "paths" maps the base's last component to (e.g. "smollm2" for
 * /data/smollm2), else the bundle's; job.json's "base"."model" names that
 * directory. A missing or different file is not an error: it is listed in
 * *lacks ("path" as the bundle names it, "local" where it was looked for,
 * "why" "missing" or "sha256 differs (have X..., job has Y...)" — a size
 * difference reads "sha256 differs (have N bytes, job has M bytes)" without
 * hashing), and its path in job.json stays as the bundle names it. Returns
 * -1 on an invalid node_paths entry and on I/O errors writing DIR/jobs/ID
 * (*lacks is then empty). */
/* node.json's "paths" object (NULL: none; pool_bundle_check judges it). */
json_t *pool_node_paths(json_t *node);
int pool_bundle_check(const pool_bundle *b, const char *state_dir, json_t *node_paths,
                      pool_lacks *lacks, char *err, size_t errlen);

/* Whether the lacks leave this node able to be the first stage (it has the
 * tokenizer and every data file, and can hold a stage at all) and able to
 * hold any stage (it has the initial weights and the base model's files if
 * the job names any). */
void pool_lacks_roles(const pool_lacks *lacks, bool *can_first, bool *can_any);
int pool_lacks_add(pool_lacks *lacks, const char *role, const char *path, const char *local,
                   const char *why);
int pool_lacks_copy(pool_lacks *dst, const pool_lacks *src);
void pool_lacks_free(pool_lacks *lacks);

/* The cost model's shape of a job (what every member plans with): the
 * model's (cfg, the job's config) at the job's sequence length, with the
 * job's LoRA rank and target modules and its NF4 base (cost_shape's lora_r,
 * lora_modules, nf4; full fine-tuning without "lora"). */
cost_shape pool_job_shape(const llama_config *cfg, const job_spec *js);

/* pool_fetch.c: opens STATE/REL for FETCH to serve, read-only, refusing a
 * symbolic link anywhere in REL (each component is opened with O_NOFOLLOW,
 * so a link planted under jobs/ cannot serve a file from elsewhere) and
 * anything but a regular file. Returns the descriptor, or -1 with errno
 * (ELOOP for a link, EINVAL for not a regular file). */
int pool_fetch_open(const char *state, const char *rel);

#endif

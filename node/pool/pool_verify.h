/* pool_verify.h — the pool's checks on what other members gossip
 * (pool_verify.c; the typed ones are in pool_core.h) on JSON documents, for
 * tests and fuzz targets: they read the documents through the typed
 * parsers and call the same checks the core does. */
#ifndef SHARDNODE_POOL_VERIFY_H
#define SHARDNODE_POOL_VERIFY_H

#include "pool_core.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the same checks as pool_core.h on JSON documents (pool_verify.c) ----
 * A member as they see it: its name and overlay address from its signed
 * record, whether it is alive or suspect, and its job document (NULL:
 * none), read with pool_doc_from_json (a document that does not read is
 * none). */
typedef struct {
    const char *name;
    const char *address;
    bool live;
    json_t *doc;
} pool_peer;

uint64_t pool_unhex64(const char *s);       /* 0 unless 1 to 16 hex digits */
/* pool_plan_hash of a layout or of a committed section's layout; 1 when it
 * does not read. */
uint64_t pool_layout_hash(json_t *layout);
/* pool_plan_verify of committed section c with base membership `base` (a
 * JSON list of names). Returns 0, or -1 with the reason in why. */
int pool_commit_verify(json_t *c, const char *id, json_t *base, int64_t base_e,
                       uint64_t base_plan, const pool_peer *peers, int n, char *why,
                       size_t whylen);
/* A vote as JSON with "m" members; and read back (-1: not a vote). */
json_t *pool_vote_json(const elect_vote *v, json_t *members);
int pool_vote_parse(json_t *j, elect_vote *v);
/* pool_bundle_from_carrier and pool_bundle_gather_dir of a JSON bundle
 * (one that does not read is nobody's, and is gathered under job_dir). */
bool pool_job_from(json_t *bundle, const char *carrier, const pool_peer *peers, int n);
void pool_gather_dir(json_t *bundle, const char *self, const char *job_dir, char *out,
                     size_t len);

#endif

/* pool_run.c — the files a member's stage of a committed plan runs from
 * (docs/FORMATS.md, "State directory"): job-eE.json (the job at the plan's
 * micro-batch), cluster-eE.json (the stages at their overlay addresses) and
 * hello-eE.json (the HELLO keys of this stage with every other, 0600). */
#include "node_base.h"
#include "pool_internal.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pool_hello_key(const uint8_t own_priv[GOSSIP_KEY_LEN], const uint8_t own_pub[GOSSIP_KEY_LEN],
                   const uint8_t peer_pub[GOSSIP_KEY_LEN], const char *run,
                   uint8_t key[MESH_HELLO_KEY_LEN])
{
    EVP_PKEY *a = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, NULL, own_priv, GOSSIP_KEY_LEN);
    EVP_PKEY *b = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, NULL, peer_pub, GOSSIP_KEY_LEN);
    EVP_PKEY_CTX *ctx = a ? EVP_PKEY_CTX_new(a, NULL) : NULL;
    uint8_t shared[32];
    size_t slen = sizeof shared;
    int ok = ctx && b && EVP_PKEY_derive_init(ctx) > 0 && EVP_PKEY_derive_set_peer(ctx, b) > 0 &&
             EVP_PKEY_derive(ctx, shared, &slen) > 0 && slen == sizeof shared;
    EVP_PKEY_CTX_free(ctx);
    EVP_PKEY_free(a);
    EVP_PKEY_free(b);
    if (!ok) return -1;
    /* "shardnode pipeline" NUL run NUL, then both public keys, lower first */
    uint8_t msg[20 + MESH_TEXT_MAX + 2 * GOSSIP_KEY_LEN];
    size_t k = 0, rl = strnlen(run, MESH_TEXT_MAX - 1);
    memcpy(msg, "shardnode pipeline", 19);
    k = 19;
    memcpy(msg + k, run, rl);
    k += rl;
    msg[k++] = 0;
    bool own_first = memcmp(own_pub, peer_pub, GOSSIP_KEY_LEN) < 0;
    memcpy(msg + k, own_first ? own_pub : peer_pub, GOSSIP_KEY_LEN);
    memcpy(msg + k + GOSSIP_KEY_LEN, own_first ? peer_pub : own_pub, GOSSIP_KEY_LEN);
    k += 2 * GOSSIP_KEY_LEN;
    unsigned int mdlen = 0;
    ok = HMAC(EVP_sha256(), shared, sizeof shared, msg, k, key, &mdlen) && mdlen == 32;
    OPENSSL_cleanse(shared, sizeof shared);
    return ok ? 0 : -1;
}

/* The HELLO keys of this node's stage with every other stage of the plan
 * (pool_hello_key with each one's WireGuard key from its own record), 0600. */
static int write_hello_keys(daemon_t *d, const pool_plan *c, const char *run, const char *path,
                            char *err, size_t errlen)
{
    const gossip_member *const *list;
    size_t n = gossip_members(d->g, &list);
    json_t *keys = json_object();
    for (int s = 0; s < c->nstages; s++)
        for (int h = 0; h < c->stage[s].nholders; h++) {
            const char *name = c->stage[s].holder[h].name;
            if (strcmp(name, d->name) == 0) continue;
            for (size_t k = 0; k < n; k++) {
                uint8_t key[MESH_HELLO_KEY_LEN];
                char hex[2 * MESH_HELLO_KEY_LEN + 1];
                if (strcmp(list[k]->rec.name, name) != 0 ||
                    pool_hello_key(d->wg_priv, d->wg_pub, list[k]->rec.wg_pub, run, key) != 0)
                    continue;
                node_hex_encode(key, sizeof key, hex);
                OPENSSL_cleanse(key, sizeof key);
                json_object_set_new(keys, name, json_string(hex));
            }
        }
    int rc = node_write_json(path, keys, 0600, err, errlen);
    json_decref(keys);
    return rc;
}

/* job-eE.json (the job at the plan's micro-batch), cluster-eE.json (the
 * stages at their overlay addresses) and hello-eE.json. */
int pool_write_run_files(daemon_t *d, const pool_plan *c, char *job_path, char *cl_path,
                         char *keys_path, size_t len, char *err, size_t errlen)
{
    pool *p = d->pool;
    long long e = (long long)c->epoch;
    char src[DAEMON_PATH_MAX + 32];
    snprintf(src, sizeof src, "%s/job.json", p->dir);
    snprintf(job_path, len, "%s/job-e%lld.json", p->dir, e);
    snprintf(cl_path, len, "%s/cluster-e%lld.json", p->dir, e);
    snprintf(keys_path, len, "%s/hello-e%lld.json", p->dir, e);
    json_t *job = node_load_json(src, err, errlen);
    if (!job) return -1;
    json_object_set_new(job, "micro_batch", json_integer((json_int_t)c->mb));
    if (c->snapshot_every > 0)
        json_object_set_new(job, "snapshot_every", json_integer((json_int_t)c->snapshot_every));
    json_t *nodes = json_array();
    for (int s = 0; s < c->nstages; s++)
        json_array_append_new(nodes, json_pack("{s:s,s:s,s:i,s:[i,i]}", "name",
                                               c->stage[s].holder[0].name, "host",
                                               c->stage[s].holder[0].address, "port",
                                               POOL_DATA_PORT, "layers", c->stage[s].layer_begin,
                                               c->stage[s].layer_end));
    char run[64];
    snprintf(run, sizeof run, "job-%s-e%lld", p->id, e);
    json_t *cl = json_pack("{s:s,s:s,s:i,s:o}", "run", run, "schedule", "1f1b", "timeout_ms",
                           60000, "nodes", nodes);
    int rc = 0;
    if (node_write_json(job_path, job, 0644, err, errlen) ||
        node_write_json(cl_path, cl, 0644, err, errlen) ||
        write_hello_keys(d, c, run, keys_path, err, errlen))
        rc = -1;
    json_decref(job);
    json_decref(cl);
    return rc;
}


/* fuzz_node.h — what the targets that open a node share (fuzz_control,
 * fuzz_state): a state directory made once by state_create (as `shardnode
 * init`), with the texts of its node.json and mesh.json kept so that each
 * input starts from them again, and a node opened from it as daemon_run
 * makes it (gossip state and pool), with no network: no UDP, no WireGuard,
 * no timers. */
#ifndef SHARDNODE_FUZZ_NODE_H
#define SHARDNODE_FUZZ_NODE_H

#include "daemon_internal.h"
#include "fuzz_util.h"
#include "node_base.h"

typedef struct {
    char dir[600];   /* fuzz_dir()/state */
    char node_text[8192], mesh_text[8192];
} fuzz_state_dir;

/* Makes the state directory (node "fuzz") and keeps its two files' texts. */
static inline void fuzz_state_make(fuzz_state_dir *s, const char *target)
{
    char err[512], path[700], overlay[64], mesh_hex[33];
    snprintf(s->dir, sizeof s->dir, "%s/state", fuzz_dir());
    fuzz_require(state_create(s->dir, "fuzz", 51820, "198.51.100.1:51820", "10.77.0.0/16", NULL,
                              overlay, sizeof overlay, mesh_hex, err, sizeof err) == 0,
                 target, "state_create", err);
    snprintf(path, sizeof path, "%s/node.json", s->dir);
    fuzz_read_text(target, path, s->node_text, sizeof s->node_text);
    snprintf(path, sizeof path, "%s/mesh.json", s->dir);
    fuzz_read_text(target, path, s->mesh_text, sizeof s->mesh_text);
}

/* Writes node.json and mesh.json back as state_create made them. */
static inline void fuzz_state_restore(const fuzz_state_dir *s)
{
    char path[700];
    fuzz_write_file("state/node.json", s->node_text, strlen(s->node_text), path, sizeof path);
    fuzz_write_file("state/mesh.json", s->mesh_text, strlen(s->mesh_text), path, sizeof path);
}

static inline void fuzz_send_nothing(void *ctx, const char *addr, int port, const uint8_t *buf,
                                     size_t len)
{
    (void)ctx, (void)addr, (void)port, (void)buf, (void)len;
}

static inline void fuzz_sync_nothing(void *ctx, const gossip_member *m) { (void)ctx, (void)m; }

/* The node of the state directory as daemon_run opens it (its gossip state
 * and pool), without its sockets to the network. */
static inline daemon_t *fuzz_state_open_node(const fuzz_state_dir *s, const char *target)
{
    char err[512];
    daemon_t *d;
    fuzz_require(daemon_open_state(&d, s->dir, err, sizeof err) == 0, target, "open state", err);
    gossip_config gc;
    memset(&gc, 0, sizeof gc);
    gc.prefix = d->prefix;
    daemon_self_record(d, &gc.self);
    memcpy(gc.id_priv, d->id_priv, GOSSIP_KEY_LEN);
    memcpy(gc.wg_priv, d->wg_priv, GOSSIP_KEY_LEN);
    gc.self_adm = d->adm;
    gc.hooks = (gossip_hooks){.ctx = d, .send = fuzz_send_nothing, .sync = fuzz_sync_nothing};
    gc.seed = 1;
    fuzz_require(gossip_create(&d->g, &gc, daemon_now_ms(), err, sizeof err) == 0, target,
                 "gossip", err);
    d->adm = gossip_self(d->g)->sig.adm;
    fuzz_require(pool_open(d) == 0, target, "pool", NULL);
    return d;
}

#endif

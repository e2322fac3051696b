/* state_create.c — a node's state directory as `shardnode init` and
 * `shardnode join` make it (state_create), and the invites `shardnode
 * invite` records for the running node to redeem (state_record_invite):
 * the daemon's files, written by the commands (daemon.h). Formats in
 * docs/FORMATS.md ("State directory"). */
#include "daemon_internal.h"
#include "node_base.h"
#include "runtime.h"

#include "keys.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Files that make a directory a node's: any of them present means init
 * would overwrite someone's identity. */
static const char *const state_files[] = {"wg.key", "id.key", "node.json", "mesh.json"};

/* Removes what a failed init wrote, so a second try is not refused as
 * "already holds a node". */
static void init_undo(const char *state, bool created_dir)
{
    char path[NODE_PATH_MAX];
    for (size_t i = 0; i < sizeof state_files / sizeof *state_files; i++)
        if (node_state_path(path, state, state_files[i]) == 0) unlink(path);
    if (created_dir) rmdir(state);
}

int state_create(const char *state, const char *name, long port, const char *endpoint,
                 const char *prefix, const uint8_t *join_mesh_id, char *overlay,
                 size_t overlay_len, char mesh_hex[33], char *err, size_t errlen)
{
    char path[NODE_PATH_MAX];
    if (node_state_path(path, state, "node.json") != 0)
        return node_errf(err, errlen, "--state \"%.80s...\": path too long", state);

    bool created_dir = false;
    struct stat st;
    if (mkdir(state, 0700) == 0) {
        created_dir = true;
    } else if (errno != EEXIST) {
        return node_errf(err, errlen, "%s: cannot create: %s", state, strerror(errno));
    } else if (stat(state, &st) != 0 || !S_ISDIR(st.st_mode)) {
        return node_errf(err, errlen, "%s exists and is not a directory", state);
    }
    for (size_t i = 0; !created_dir && i < sizeof state_files / sizeof *state_files; i++) {
        node_state_path(path, state, state_files[i]);
        if (lstat(path, &st) == 0 || errno != ENOENT) {
            return node_errf(err, errlen, "%s already holds a node (%s); remove it or use "
                             "another --state", state, state_files[i]);
        }
    }
    /* Exactly 0700 whatever the umask, and also for a directory that
     * existed: it holds private keys and invite secrets. */
    if (chmod(state, 0700) != 0) {
        node_errf(err, errlen, "%s: cannot set mode 0700: %s", state, strerror(errno));
        if (created_dir) rmdir(state);
        return -1;
    }

    uint8_t wg_priv[KEYS_LEN], wg_pub[KEYS_LEN], id_priv[KEYS_LEN], id_pub[KEYS_LEN];
    uint8_t mesh_id[TOKEN_MESH_ID_LEN];
    char wg_b64[KEYS_BASE64_LEN + 1], id_b64[KEYS_BASE64_LEN + 1];
    json_t *node = NULL, *mesh = NULL;
    int rc = -1;
    if (join_mesh_id) memcpy(mesh_id, join_mesh_id, sizeof mesh_id);
    /* A new mesh's id derives from its founder's identity key: that is how
     * every member recognises the founder's own admission (PROTOCOL.md,
     * "Membership"). */
    if (keys_x25519_generate(wg_priv, wg_pub, err, errlen) != 0 ||
        keys_ed25519_generate(id_priv, id_pub, err, errlen) != 0 ||
        (!join_mesh_id && keys_mesh_id(id_pub, mesh_id, err, errlen) != 0) ||
        mesh_overlay_address(prefix, wg_pub, overlay, overlay_len, err, errlen) != 0)
        goto fail;
    keys_to_base64(wg_pub, wg_b64);
    keys_to_base64(id_pub, id_b64);
    node_hex_encode(mesh_id, sizeof mesh_id, mesh_hex);

    devices_info dev;
    devices_detect(&dev);
    json_t *devices = devices_to_json(&dev);
    /* "s?" writes null for a node without an endpoint; "o" steals devices
     * even when the pack fails. */
    node = devices ? json_pack("{s:s, s:i, s:s?, s:s, s:s, s:s, s:i, s:s, s:o}", "name", name,
                               "listen_port", (int)port, "endpoint", endpoint, "wg_public_key",
                               wg_b64, "id_public_key", id_b64, "overlay_address", overlay,
                               "protocol_version", MESH_PROTOCOL_VERSION, "software_version",
                               SHARDNODE_VERSION, "devices", devices)
                   : NULL;
    /* A joiner's mesh.json lists no members until the join is accepted
     * ("joined": false); the daemon fills in the signed records. */
    mesh = join_mesh_id
               ? json_pack("{s:s, s:s, s:I, s:i, s:b, s:[]}", "mesh_id", mesh_hex, "prefix",
                           prefix, "created", (json_int_t)time(NULL), "gossip_port",
                           GOSSIP_DEFAULT_PORT, "joined", 0, "members")
               : json_pack("{s:s, s:s, s:I, s:i, s:b, s:[{s:s, s:s, s:s, s:s, s:s?}]}",
                           "mesh_id", mesh_hex, "prefix", prefix, "created",
                           (json_int_t)time(NULL), "gossip_port", GOSSIP_DEFAULT_PORT,
                           "joined", 1, "members", "name", name, "wg_public_key", wg_b64,
                           "id_public_key", id_b64, "overlay_address", overlay, "endpoint",
                           endpoint);
    if (!node || !mesh) {
        snprintf(err, errlen, "cannot build node.json (out of memory, or a CPU model "
                                  "name that is not UTF-8)");
        goto fail;
    }
    /* The identity key first and node.json last: a directory with node.json
     * is complete. */
    if (node_state_path(path, state, "id.key") != 0 ||
        keys_file_write(path, id_priv, err, errlen) != 0 ||
        node_state_path(path, state, "wg.key") != 0 ||
        keys_file_write(path, wg_priv, err, errlen) != 0 ||
        node_state_path(path, state, "mesh.json") != 0 ||
        node_write_json(path, mesh, 0644, err, errlen) != 0 ||
        node_state_path(path, state, "node.json") != 0 ||
        node_write_json(path, node, 0644, err, errlen) != 0)
        goto fail;
    rc = 0;
    goto out;
fail:
    init_undo(state, created_dir);
out:
    node_wipe(wg_priv, sizeof wg_priv);
    node_wipe(id_priv, sizeof id_priv);
    json_decref(node);
    json_decref(mesh);
    return rc;
}

/* Appends {secret, expires, issued} to DIR/invites.json, dropping entries
 * already expired (token_decode refuses their tokens anyway, and the file
 * must not grow forever). The caller holds the invites lock. */
int state_record_invite(const char *state, const uint8_t secret[TOKEN_SECRET_LEN],
                         int64_t expires, int64_t now, char *err, size_t errlen)
{
    char path[NODE_PATH_MAX];
    node_state_path(path, state, "invites.json");
    json_t *root;
    if (access(path, F_OK) != 0 && errno == ENOENT) {
        root = json_pack("{s:[]}", "invites");
    } else if (!(root = node_load_json(path, err, errlen))) {
        return -1;
    }
    json_t *list = root ? json_object_get(root, "invites") : NULL;
    if (!json_is_array(list)) {
        snprintf(err, errlen, "%s: expected \"invites\": [...]", path);
        json_decref(root);
        return -1;
    }
    for (size_t i = json_array_size(list); i-- > 0;) {
        json_t *e = json_object_get(json_array_get(list, i), "expires");
        if (json_is_integer(e) && json_integer_value(e) <= now) json_array_remove(list, i);
    }
    /* A running node holds at most DAEMON_MAX_INVITES invites' keys: one
     * more would be recorded but never admitted. */
    size_t open = 0, i;
    json_t *e;
    json_array_foreach(list, i, e) {
        json_t *exp = json_object_get(e, "expires"), *at = json_object_get(e, "used_at");
        daemon_invite iv = {.expires = json_is_integer(exp) ? json_integer_value(exp) : 0,
                            .used = json_object_get(e, "used_by") != NULL,
                            .used_at = json_is_integer(at) ? json_integer_value(at) : 0};
        open += !daemon_invite_withdrawn(&iv, now);
    }
    if (open >= DAEMON_MAX_INVITES) {
        snprintf(err, errlen, "%s: %zu invites are still open (neither used nor expired), the "
                 "most a node admits at once; wait until some are used or expire (--ttl sets "
                 "how long a token lives), or delete unused ones from the file", path, open);
        json_decref(root);
        return -1;
    }
    char hex[2 * TOKEN_SECRET_LEN + 1];
    node_hex_encode(secret, TOKEN_SECRET_LEN, hex);
    int rc = json_array_append_new(list, json_pack("{s:s, s:I, s:I}", "secret", hex, "expires",
                                                   (json_int_t)expires, "issued",
                                                   (json_int_t)now));
    if (rc != 0)
        snprintf(err, errlen, "%s: out of memory", path);
    else
        rc = node_write_json(path, root, 0600, err, errlen); /* the secrets admit nodes */
    json_decref(root);
    return rc;
}

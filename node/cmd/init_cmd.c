/* init_cmd.c — the offline half of joining a mesh: `shardnode init` makes a
 * node's state directory (keys, node.json, mesh.json for a new mesh) and
 * `shardnode invite` issues a signed, single-use invite token for it,
 * recording the secret in invites.json for the running node to redeem once
 * (the files themselves are written by state_create and state_record_invite,
 * node/daemon/state_create.c). Formats in docs/FORMATS.md ("State directory") and docs/PROTOCOL.md
 * ("Invite tokens").
 *
 *   shardnode init --state DIR --name NAME [--listen-port P] [--endpoint HOST:PORT]
 *                  [--prefix CIDR]
 *   shardnode invite --state DIR [--ttl DURATION]
 */
#include "commands.h"
#include "daemon.h"
#include "node_base.h"

#include "keys.h"
#include "mesh.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define INIT_DEFAULT_PORT 51820
#define INIT_DEFAULT_PREFIX "10.77.0.0/16"
#define INVITE_DEFAULT_TTL "24h"
#define INVITE_MAX_TTL_S (365L * 86400)

/* "90s", "30m", "24h", "7d" into seconds, 1 s .. INVITE_MAX_TTL_S. A unit is
 * required: a bare "30" could mean minutes as easily as seconds. */
static int parse_duration(const char *s, long *out)
{
    long v = 0;
    const char *c = s;
    if (*c < '0' || *c > '9') return -1;
    for (; *c >= '0' && *c <= '9'; c++) {
        v = v * 10 + (*c - '0');
        if (v > INVITE_MAX_TTL_S) return -1;
    }
    long unit = c[0] == 's' ? 1 : c[0] == 'm' ? 60 : c[0] == 'h' ? 3600 : c[0] == 'd' ? 86400 : 0;
    if (!unit || c[1] || v < 1 || v > INVITE_MAX_TTL_S / unit) return -1;
    *out = v * unit;
    return 0;
}

static void init_usage(void)
{
    fprintf(stderr, "usage: shardnode init --state DIR --name NAME [--listen-port P] "
                    "[--endpoint HOST:PORT] [--prefix CIDR]\n");
}

int cmd_init(int argc, char **argv)
{
    const char *state = NULL, *name = NULL, *port_s = NULL, *endpoint = NULL, *prefix = NULL;
    const args_option opts[] = {
        {"--state", &state, NULL},       {"--name", &name, NULL},
        {"--listen-port", &port_s, NULL}, {"--endpoint", &endpoint, NULL},
        {"--prefix", &prefix, NULL},
    };
    const int nopts = (int)(sizeof opts / sizeof *opts);
    static const char *const required[] = {"--state", "--name", NULL};
    char err[2 * NODE_PATH_MAX]; /* room for a path and a reason */
    if (args_parse(argc, argv, 2, opts, nopts, err, sizeof err) != 0 ||
        args_require(opts, nopts, required, err, sizeof err) != 0) {
        fprintf(stderr, "shardnode init: %s\n", err);
        init_usage();
        return 2;
    }
    /* Every flag is checked before anything touches the disk. */
    if (!node_name_valid(name)) {
        fprintf(stderr, "shardnode init: --name \"%s\": expected 1 to %d characters of "
                        "A-Z a-z 0-9 . _ -\n", name, MESH_NAME_MAX - 1);
        return 2;
    }
    long port = INIT_DEFAULT_PORT;
    if (port_s && args_int(port_s, "--listen-port", 1, 65535, &port, err, sizeof err) != 0) {
        fprintf(stderr, "shardnode init: %s\n", err);
        return 2;
    }
    if (endpoint && !token_endpoint_valid(endpoint)) {
        fprintf(stderr, "shardnode init: --endpoint \"%s\": expected HOST:PORT or "
                        "[IPv6]:PORT, port 1-65535, at most %d characters\n", endpoint,
                TOKEN_STR_MAX);
        return 2;
    }
    if (!prefix) prefix = INIT_DEFAULT_PREFIX;
    if (strlen(prefix) > TOKEN_STR_MAX) {
        fprintf(stderr, "shardnode init: --prefix \"%.80s...\": longer than %d characters\n",
                prefix, TOKEN_STR_MAX);
        return 2;
    }
    /* mesh_overlay_address is the one judge of a prefix (format, host bits,
     * room for hosts): ask it with a throwaway key now rather than after
     * the keys are made. */
    char overlay[64];
    const uint8_t probe_key[KEYS_LEN] = {0};
    if (mesh_overlay_address(prefix, probe_key, overlay, sizeof overlay, err, sizeof err) != 0) {
        fprintf(stderr, "shardnode init: --prefix: %s\n", err);
        return 2;
    }
    char path[NODE_PATH_MAX];
    if (node_state_path(path, state, "node.json") != 0) {
        fprintf(stderr, "shardnode init: --state \"%.80s...\": path too long\n", state);
        return 2;
    }
    char mesh_hex[2 * TOKEN_MESH_ID_LEN + 1];
    if (state_create(state, name, port, endpoint, prefix, NULL, overlay, sizeof overlay,
                     mesh_hex, err, sizeof err) != 0) {
        fprintf(stderr, "shardnode init: %s\n", err);
        return 1;
    }
    printf("node %s in %s: overlay address %s, new mesh %s (%s)\n", name, state, overlay,
           mesh_hex, prefix);
    return 0;
}

/* ---- invite ---- */

int cmd_invite(int argc, char **argv)
{
    const char *state = NULL, *ttl_s = NULL;
    const args_option opts[] = {{"--state", &state, NULL}, {"--ttl", &ttl_s, NULL}};
    const int nopts = (int)(sizeof opts / sizeof *opts);
    static const char *const required[] = {"--state", NULL};
    char err[2 * NODE_PATH_MAX]; /* room for a path and a reason */
    if (args_parse(argc, argv, 2, opts, nopts, err, sizeof err) != 0 ||
        args_require(opts, nopts, required, err, sizeof err) != 0) {
        fprintf(stderr, "shardnode invite: %s\n", err);
        fprintf(stderr, "usage: shardnode invite --state DIR [--ttl DURATION]\n");
        return 2;
    }
    long ttl;
    if (!ttl_s) ttl_s = INVITE_DEFAULT_TTL;
    if (parse_duration(ttl_s, &ttl) != 0) {
        fprintf(stderr, "shardnode invite: --ttl \"%s\": expected a duration such as 90s, 30m, "
                        "24h or 7d, at most 365d\n", ttl_s);
        return 2;
    }
    char node_path[NODE_PATH_MAX], mesh_path[NODE_PATH_MAX], id_path[NODE_PATH_MAX],
        lock_path[NODE_PATH_MAX];
    if (node_state_path(node_path, state, "node.json") != 0 ||
        node_state_path(mesh_path, state, "mesh.json") != 0 ||
        node_state_path(id_path, state, "id.key") != 0 ||
        node_state_path(lock_path, state, "invites.lock") != 0) {
        fprintf(stderr, "shardnode invite: --state \"%.80s...\": path too long\n", state);
        return 2;
    }

    struct token t;
    memset(&t, 0, sizeof t);
    uint8_t id_priv[KEYS_LEN];
    char text[TOKEN_TEXT_MAX];
    json_t *node = NULL, *mesh = NULL;
    int lock_fd = -1, rc = 1;
    const char *endpoint, *mesh_hex, *prefix, *wg_b64;
    if (!(node = node_load_json(node_path, err, sizeof err)) ||
        !(mesh = node_load_json(mesh_path, err, sizeof err)))
        goto fail;
    if (json_is_false(json_object_get(mesh, "joined"))) {
        snprintf(err, sizeof err, "%s has not joined its mesh yet, so it cannot invite "
                 "others; finish `shardnode join` first", state);
        goto fail;
    }
    endpoint = node_json_str(node, "endpoint");
    if (!endpoint || !*endpoint) {
        snprintf(err, sizeof err, "%s has no endpoint, and a joiner must be able to reach "
                 "this node: add \"endpoint\": \"HOST:PORT\" to it", node_path);
        goto fail;
    }
    if (!token_endpoint_valid(endpoint)) {
        snprintf(err, sizeof err, "%s: endpoint \"%.80s\" is not HOST:PORT or [IPv6]:PORT",
                 node_path, endpoint);
        goto fail;
    }
    mesh_hex = node_json_str(mesh, "mesh_id");
    prefix = node_json_str(mesh, "prefix");
    if (!mesh_hex || node_hex_decode(mesh_hex, t.mesh_id, sizeof t.mesh_id) != 0) {
        snprintf(err, sizeof err, "%s: \"mesh_id\" must be %d hex digits", mesh_path,
                 2 * TOKEN_MESH_ID_LEN);
        goto fail;
    }
    if (!prefix || strlen(prefix) > TOKEN_STR_MAX) {
        snprintf(err, sizeof err, "%s: \"prefix\" missing or longer than %d characters",
                 mesh_path, TOKEN_STR_MAX);
        goto fail;
    }
    wg_b64 = node_json_str(node, "wg_public_key");
    if (!wg_b64 || keys_from_base64(wg_b64, t.members[0].wg_pub, err, sizeof err) != 0) {
        snprintf(err, sizeof err, "%s: \"wg_public_key\" is not a base64 key", node_path);
        goto fail;
    }
    /* The identity public key comes from the private key, never from
     * node.json: a token must carry the key that signed it. */
    if (keys_file_read(id_path, id_priv, err, sizeof err) != 0 ||
        keys_ed25519_public(id_priv, t.members[0].id_pub, err, sizeof err) != 0)
        goto fail;
    snprintf(t.prefix, sizeof t.prefix, "%s", prefix);
    snprintf(t.members[0].endpoint, sizeof t.members[0].endpoint, "%s", endpoint);
    /* Only this node for now: other members' endpoints are known once the
     * daemon gossips, and the joiner redeems the secret with the issuer. */
    t.nmembers = 1;
    int64_t now = (int64_t)time(NULL);
    t.expires_unix = now + ttl;
    /* The invite key's overlay address must be no member's: WireGuard would
     * move that member's address to the invite's peer. Draw again. */
    for (int tries = 0;; tries++) {
        uint8_t ipriv[KEYS_LEN], ipub[KEYS_LEN];
        char iaddr[64];
        bool taken = false;
        if (keys_random(t.secret, sizeof t.secret, err, sizeof err) != 0 ||
            keys_invite_key(t.secret, sizeof t.secret, ipriv, ipub, err, sizeof err) != 0 ||
            mesh_overlay_address(prefix, ipub, iaddr, sizeof iaddr, err, sizeof err) != 0)
            goto fail;
        memset(ipriv, 0, sizeof ipriv);
        size_t mi;
        json_t *me;
        json_array_foreach(json_object_get(mesh, "members"), mi, me) {
            const char *a = node_json_str(me, "overlay_address");
            taken |= a && strcmp(a, iaddr) == 0;
        }
        if (!taken) break;
        if (tries == 15) {
            snprintf(err, sizeof err, "no invite key with a free overlay address in %s after "
                     "16 tries", prefix);
            goto fail;
        }
    }
    if (token_encode(&t, id_priv, text, sizeof text, err, sizeof err) != 0) goto fail;

    /* Two invites at once must not lose each other's record: the
     * read-modify-write of invites.json happens under a lock that the node
     * daemon takes too. */
    lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (lock_fd < 0 || fcntl(lock_fd, F_SETLKW, &fl) != 0) {
        snprintf(err, sizeof err, "%s: cannot lock: %s", lock_path, strerror(errno));
        goto fail;
    }
    /* Recorded before printed: a token whose secret was not saved could
     * never be redeemed. */
    if (state_record_invite(state, t.secret, t.expires_unix, now, err, sizeof err) != 0) goto fail;
    /* Unlocked before the node is told: the node takes this lock to record
     * a token's use, and a node waiting for it could not answer us. */
    close(lock_fd);
    lock_fd = -1;
    /* A running node adds the invite's key at once (else within a second). */
    json_decref(node_control_request(state, "invites", err, sizeof err));
    printf("%s\n", text);
    if (fflush(stdout) != 0) {
        snprintf(err, sizeof err, "cannot write the token to stdout: %s", strerror(errno));
        goto fail;
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "shardnode invite: %s\n", err);
out:
    if (lock_fd >= 0) close(lock_fd);
    node_wipe(id_priv, sizeof id_priv);
    node_wipe(&t, sizeof t);
    json_decref(node);
    json_decref(mesh);
    return rc;
}

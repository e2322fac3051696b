/* init_cmd.c — the offline half of joining a mesh: `shardnode init` makes a
 * node's state directory (keys, node.json, mesh.json for a new mesh) and
 * `shardnode invite` issues a signed, single-use invite token for it,
 * recording the secret in invites.json for the running node to redeem once.
 * Formats in docs/FORMATS.md ("State directory") and docs/PROTOCOL.md
 * ("Invite tokens").
 *
 *   shardnode init --state DIR --name NAME [--listen-port P] [--endpoint HOST:PORT]
 *                  [--prefix CIDR]
 *   shardnode invite --state DIR [--ttl DURATION]
 */
#include "daemon_internal.h"
#include "node.h"

#include "keys.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The software version node.json and the gossiped record carry; the
 * project() version in the top-level CMakeLists.txt. */
#ifndef SHARDNODE_VERSION
#define SHARDNODE_VERSION "0.1.0"
#endif

#define INIT_DEFAULT_PORT 51820
#define INIT_DEFAULT_PREFIX "10.77.0.0/16"
#define INVITE_DEFAULT_TTL "24h"
#define INVITE_MAX_TTL_S (365L * 86400)
#define STATE_PATH_MAX 4096

/* Files that make a directory a node's: any of them present means init
 * would overwrite someone's identity. */
static const char *const state_files[] = {"wg.key", "id.key", "node.json", "mesh.json"};

/* Private keys should not outlive their use in memory; a plain memset
 * before return may be optimised away, the volatile stores may not. */
static void wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    while (n--) *v++ = 0;
}

void node_hex_encode(const uint8_t *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

int node_hex_decode(const char *s, uint8_t *b, size_t n)
{
    if (strlen(s) != 2 * n) return -1;
    for (size_t i = 0; i < 2 * n; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (v < 0) return -1;
        b[i / 2] = (uint8_t)(i % 2 ? (b[i / 2] << 4) | v : v);
    }
    return 0;
}

static int state_path(char *out, const char *dir, const char *name)
{
    int n = snprintf(out, STATE_PATH_MAX, "%s/%s", dir, name);
    return n < 0 || n >= STATE_PATH_MAX ? -1 : 0;
}

/* Node names go into file names, logs and gossip: keep them to a set that
 * needs no quoting anywhere. */
int node_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > MESH_NAME_MAX - 1) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '.' || *s == '_' || *s == '-'))
            return 0;
    return 1;
}

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

/* Writes j (and a newline) to path through atomic_file with the given mode,
 * set on the temporary file before anything is written to it. */
int node_write_json(const char *path, json_t *j, unsigned mode, char *err, size_t errlen)
{
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!text) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    atomic_file f;
    if (atomic_file_begin(&f, path, err, errlen) != 0) {
        free(text);
        return -1;
    }
    if (fchmod(f.fd, mode) != 0) {
        snprintf(err, errlen, "%s: cannot set mode %o: %s", f.tmp, (unsigned)mode,
                 strerror(errno));
        atomic_file_abort(&f);
        free(text);
        return -1;
    }
    atomic_file_write(&f, text, strlen(text));
    atomic_file_write(&f, "\n", 1);
    free(text);
    return atomic_file_commit(&f, err, errlen);
}

static void init_usage(void)
{
    fprintf(stderr, "usage: shardnode init --state DIR --name NAME [--listen-port P] "
                    "[--endpoint HOST:PORT] [--prefix CIDR]\n");
}

/* Removes what a failed init wrote, so a second try is not refused as
 * "already holds a node". */
static void init_undo(const char *state, bool created_dir)
{
    char path[STATE_PATH_MAX];
    for (size_t i = 0; i < sizeof state_files / sizeof *state_files; i++)
        if (state_path(path, state, state_files[i]) == 0) unlink(path);
    if (created_dir) rmdir(state);
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
    char err[2 * STATE_PATH_MAX]; /* room for a path and a reason */
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
    char path[STATE_PATH_MAX];
    if (state_path(path, state, "node.json") != 0) {
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

int state_create(const char *state, const char *name, long port, const char *endpoint,
                 const char *prefix, const uint8_t *join_mesh_id, char *overlay,
                 size_t overlay_len, char mesh_hex[33], char *err, size_t errlen)
{
    char path[STATE_PATH_MAX];
    if (state_path(path, state, "node.json") != 0)
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
        state_path(path, state, state_files[i]);
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
    if (state_path(path, state, "id.key") != 0 ||
        keys_file_write(path, id_priv, err, errlen) != 0 ||
        state_path(path, state, "wg.key") != 0 ||
        keys_file_write(path, wg_priv, err, errlen) != 0 ||
        state_path(path, state, "mesh.json") != 0 ||
        node_write_json(path, mesh, 0644, err, errlen) != 0 ||
        state_path(path, state, "node.json") != 0 ||
        node_write_json(path, node, 0644, err, errlen) != 0)
        goto fail;
    rc = 0;
    goto out;
fail:
    init_undo(state, created_dir);
out:
    wipe(wg_priv, sizeof wg_priv);
    wipe(id_priv, sizeof id_priv);
    json_decref(node);
    json_decref(mesh);
    return rc;
}

/* ---- invite ---- */

json_t *node_load_json(const char *path, char *err, size_t errlen)
{
    /* Opened here so a missing file reads "no such file" once, not inside
     * jansson's message that repeats the path. */
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    json_error_t je;
    json_t *j = json_loadf(f, 0, &je);
    fclose(f);
    if (!j) {
        if (je.line > 0)
            snprintf(err, errlen, "%s:%d: %s", path, je.line, je.text);
        else
            snprintf(err, errlen, "%s: %s", path, je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        snprintf(err, errlen, "%s: expected a JSON object", path);
        json_decref(j);
        return NULL;
    }
    return j;
}

/* Appends {secret, expires, issued} to DIR/invites.json, dropping entries
 * already expired (token_decode refuses their tokens anyway, and the file
 * must not grow forever). The caller holds the invites lock. */
static int record_invite(const char *state, const uint8_t secret[TOKEN_SECRET_LEN],
                         int64_t expires, int64_t now, char *err, size_t errlen)
{
    char path[STATE_PATH_MAX];
    state_path(path, state, "invites.json");
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

const char *node_json_str(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int cmd_invite(int argc, char **argv)
{
    const char *state = NULL, *ttl_s = NULL;
    const args_option opts[] = {{"--state", &state, NULL}, {"--ttl", &ttl_s, NULL}};
    const int nopts = (int)(sizeof opts / sizeof *opts);
    static const char *const required[] = {"--state", NULL};
    char err[2 * STATE_PATH_MAX]; /* room for a path and a reason */
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
    char node_path[STATE_PATH_MAX], mesh_path[STATE_PATH_MAX], id_path[STATE_PATH_MAX],
        lock_path[STATE_PATH_MAX];
    if (state_path(node_path, state, "node.json") != 0 ||
        state_path(mesh_path, state, "mesh.json") != 0 ||
        state_path(id_path, state, "id.key") != 0 ||
        state_path(lock_path, state, "invites.lock") != 0) {
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
    if (record_invite(state, t.secret, t.expires_unix, now, err, sizeof err) != 0) goto fail;
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
    wipe(id_priv, sizeof id_priv);
    wipe(&t, sizeof t);
    json_decref(node);
    json_decref(mesh);
    return rc;
}

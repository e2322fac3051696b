/* daemon_state.c — the daemon's state directory: loading node.json,
 * mesh.json and the keys, saving the signed view back to mesh.json so a
 * restarted node knows whom to call, and the invites it issued
 * (invites.json, shared with `shardnode invite` under invites.lock).
 * Formats in docs/FORMATS.md, "State directory". */
#include "daemon_internal.h"
#include "node_base.h"
#include "runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int state_file(char *out, const char *dir, const char *name)
{
    int n = snprintf(out, DAEMON_PATH_MAX, "%s/%s", dir, name);
    return n < 0 || n >= DAEMON_PATH_MAX ? -1 : 0;
}

uint64_t daemon_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

json_t *daemon_adm_json(const gossip_admission *a)
{
    char by[2 * GOSSIP_KEY_LEN + 1], sig[2 * GOSSIP_SIG_LEN + 1];
    node_hex_encode(a->by, GOSSIP_KEY_LEN, by);
    node_hex_encode(a->sig, GOSSIP_SIG_LEN, sig);
    return json_pack("{s:s, s:I, s:s}", "by", by, "at_ms", (json_int_t)a->at_ms, "sig", sig);
}

int daemon_adm_parse(json_t *j, gossip_admission *a)
{
    memset(a, 0, sizeof *a);
    const char *by = node_json_str(j, "by"), *sig = node_json_str(j, "sig");
    json_t *at = json_object_get(j, "at_ms");
    if (!by || !sig || !json_is_integer(at) || strlen(by) != 2 * GOSSIP_KEY_LEN ||
        strlen(sig) != 2 * GOSSIP_SIG_LEN || node_hex_decode(by, a->by, GOSSIP_KEY_LEN) != 0 ||
        node_hex_decode(sig, a->sig, GOSSIP_SIG_LEN) != 0) {
        memset(a, 0, sizeof *a);
        return -1;
    }
    a->at_ms = (int64_t)json_integer_value(at);
    return 0;
}

static int json_bool_or(json_t *obj, const char *key, int dflt)
{
    json_t *v = json_object_get(obj, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

int daemon_open_state(daemon_t **out, const char *state, char *err, size_t errlen)
{
    *out = NULL;
    daemon_t *d = calloc(1, sizeof *d);
    if (!d) return node_errf(err, errlen, "out of memory");
    d->udp_fd = -1;
    d->lock_fd = -1;
    *out = d;
    char path[DAEMON_PATH_MAX];
    size_t sl = strlen(state);
    if (sl >= sizeof d->state)
        return node_errf(err, errlen, "--state \"%.80s...\": path too long", state);
    memcpy(d->state, state, sl + 1);
    state_file(path, state, "node.json");
    if (access(path, F_OK) != 0)
        return node_errf(err, errlen, "%s holds no node (no node.json): run `shardnode init` "
                         "or `shardnode join`", state);
    if (!(d->node = node_load_json(path, err, errlen))) return -1;
    const char *name = node_json_str(d->node, "name");
    if (!name || !node_name_valid(name))
        return node_errf(err, errlen, "%s: \"name\" missing or not 1..63 of A-Z a-z 0-9 . _ -",
                         path);
    snprintf(d->name, sizeof d->name, "%s", name);
    json_t *port = json_object_get(d->node, "listen_port");
    if (!json_is_integer(port) || json_integer_value(port) < 1 ||
        json_integer_value(port) > 65535)
        return node_errf(err, errlen, "%s: \"listen_port\" must be an integer 1..65535", path);
    d->listen_port = (int)json_integer_value(port);
    const char *ep = node_json_str(d->node, "endpoint");
    if (ep && *ep) {
        if (!token_endpoint_valid(ep))
            return node_errf(err, errlen, "%s: \"endpoint\" \"%.80s\" is not HOST:PORT", path,
                             ep);
        snprintf(d->endpoint, sizeof d->endpoint, "%s", ep);
    }
    /* The devices as they are at this start, not as `init` or `join` found
     * them (a GPU added since, the CPUs of the container it now runs in):
     * node.json takes them when they differ (its other keys untouched; a
     * failed write keeps the old file and is no reason not to start). Gossip
     * carries what fits its record: with many GPUs, each by device, name and
     * memory, and a count of those left out (devices_gossip_text). */
    devices_info now;
    devices_detect(&now);
    d->cores = now.cpu_cores; /* node_usable_cpus: affinity and CPU quota */
    json_t *fresh = devices_to_json(&now), *dev = json_object_get(d->node, "devices");
    if (fresh && !json_equal(fresh, dev)) {
        char werr[512];
        json_object_set(d->node, "devices", fresh);
        if (node_write_json(path, d->node, 0644, werr, sizeof werr) != 0)
            fprintf(stderr, "shardnode: note: node.json keeps the devices found before: %s\n",
                    werr);
        dev = fresh;
    }
    devices_gossip_text(dev, d->devices_json, sizeof d->devices_json);
    json_decref(fresh);
    const char *ifname = node_json_str(d->node, "ifname");

    state_file(path, state, "wg.key");
    if (keys_file_read(path, d->wg_priv, err, errlen) != 0 ||
        keys_x25519_public(d->wg_priv, d->wg_pub, err, errlen) != 0)
        return -1;
    state_file(path, state, "id.key");
    if (keys_file_read(path, d->id_priv, err, errlen) != 0 ||
        keys_ed25519_public(d->id_priv, d->id_pub, err, errlen) != 0)
        return -1;
    if (ifname && *ifname) {
        if (strlen(ifname) >= MESH_WG_IFNAME_MAX)
            return node_errf(err, errlen, "%s/node.json: \"ifname\" longer than 15 characters",
                             state);
        snprintf(d->ifname, sizeof d->ifname, "%s", ifname);
    } else {
        /* Unique per node: wireguard-go's UAPI socket path is shared by
         * every network namespace of the machine. */
        char hex[9];
        node_hex_encode(d->wg_pub, 4, hex);
        snprintf(d->ifname, sizeof d->ifname, "sn%s", hex);
    }

    state_file(path, state, "mesh.json");
    if (!(d->mesh = node_load_json(path, err, errlen))) return -1;
    const char *mesh_hex = node_json_str(d->mesh, "mesh_id");
    const char *prefix = node_json_str(d->mesh, "prefix");
    if (!mesh_hex || node_hex_decode(mesh_hex, d->mesh_id, sizeof d->mesh_id) != 0)
        return node_errf(err, errlen, "%s: \"mesh_id\" must be 32 hex digits", path);
    if (!prefix || strlen(prefix) >= sizeof d->prefix || !strchr(prefix, '/'))
        return node_errf(err, errlen, "%s: \"prefix\" must be a CIDR prefix", path);
    snprintf(d->prefix, sizeof d->prefix, "%s", prefix);
    d->prefix_len = atoi(strchr(prefix, '/') + 1);
    json_t *gp = json_object_get(d->mesh, "gossip_port");
    d->gossip_port = GOSSIP_DEFAULT_PORT;
    if (gp) {
        if (!json_is_integer(gp) || json_integer_value(gp) < 1 ||
            json_integer_value(gp) > 65535)
            return node_errf(err, errlen, "%s: \"gossip_port\" must be an integer 1..65535",
                             path);
        d->gossip_port = (int)json_integer_value(gp);
    }
    d->joined = json_bool_or(d->mesh, "joined", 1);
    json_t *adm = json_object_get(d->mesh, "admission");
    if (adm && daemon_adm_parse(adm, &d->adm) != 0)
        return node_errf(err, errlen, "%s: \"admission\" must be {\"by\": 64 hex digits, "
                         "\"at_ms\": integer, \"sig\": 128 hex digits}", path);
    d->left = json_bool_or(d->mesh, "left", 0);
    if (mesh_overlay_address(d->prefix, d->wg_pub, d->overlay, sizeof d->overlay, err, errlen))
        return -1;
    d->insecure = daemon_prefix_insecure(d->prefix);
    const char *ov = node_json_str(d->node, "overlay_address");
    if (ov && strcmp(ov, d->overlay) != 0)
        return node_errf(err, errlen, "%s/node.json: \"overlay_address\" %s is not the one "
                         "wg.key gives in %s (%s)", state, ov, d->prefix, d->overlay);
    /* A restart must outbid whatever the mesh last heard from this node,
     * even "dead" claims about the saved incarnation. */
    json_t *inc = json_object_get(d->mesh, "incarnation");
    uint64_t saved = json_is_integer(inc) ? (uint64_t)json_integer_value(inc) : 0;
    /* Real seconds as a floor: an incarnation must rise across restarts
     * even when mesh.json was lost (a clock set back falls back to saved+1). */
    uint64_t now_s = (uint64_t)time(NULL);
    d->incarnation = saved + 1 > now_s ? saved + 1 : now_s;

    /* One running node per state directory. */
    state_file(path, state, "node.lock");
    d->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (d->lock_fd < 0) return node_errf(err, errlen, "%s: %s", path, strerror(errno));
    if (fcntl(d->lock_fd, F_SETLK, &fl) != 0)
        return node_errf(err, errlen, "a node is already running on %s (%s is locked)", state,
                         path);
    state_file(path, state, "node.log");
    d->logf = fopen(path, "a");
    return 0;
}

void daemon_load_members(daemon_t *d)
{
    json_t *list = json_object_get(d->mesh, "members");
    size_t i, n = json_array_size(list);
    json_t *e;
    /* Members admitted by a member listed after them come in on a later
     * pass; members that left are loaded too (their identity may have
     * admitted others). */
    bool *done = calloc(n ? n : 1, sizeof *done);
    if (!done) return;
    for (bool progress = true; progress;) {
        progress = false;
        json_array_foreach(list, i, e) {
            if (done[i]) continue;
            const char *rec = node_json_str(e, "record"), *sig = node_json_str(e, "signature");
            gossip_signed *s = calloc(1, sizeof *s);
            char why[512];
            gossip_record r;
            size_t len = rec ? strlen(rec) / 2 : 0;
            if (!rec || !sig || !s) {
                done[i] = true; /* written by init, before any record existed */
            } else if (len == 0 || len > sizeof s->bytes || node_hex_decode(rec, s->bytes, len) != 0 ||
                       node_hex_decode(sig, s->sig, sizeof s->sig) != 0) {
                daemon_log(d, "%s/mesh.json: members[%zu]: record or signature is not hex of "
                           "the right length; skipped", d->state, i);
                done[i] = true;
            } else if ((s->len = len, gossip_record_open(s, &r, why, sizeof why)) != 0) {
                daemon_log(d, "%s/mesh.json: members[%zu]: %s; skipped", d->state, i, why);
                done[i] = true;
            } else if (memcmp(r.wg_pub, d->wg_pub, GOSSIP_KEY_LEN) == 0) {
                done[i] = true; /* ourselves */
            } else {
                daemon_adm_parse(json_object_get(e, "admission"), &s->adm);
                if (gossip_add_known(d->g, s, daemon_now_ms(), why, sizeof why) == 0) {
                    done[i] = progress = true;
                }
            }
            free(s);
        }
    }
    json_array_foreach(list, i, e) {
        if (done[i]) continue;
        daemon_log(d, "%s/mesh.json: members[%zu] (%s): no valid admission by a known member; "
                   "skipped", d->state, i, node_json_str(e, "name") ? node_json_str(e, "name")
                                                                    : "?");
    }
    free(done);
}

int daemon_save(daemon_t *d, char *err, size_t errlen)
{
    json_t *list = json_array();
    const gossip_member *const *ms;
    size_t n = d->g ? gossip_members(d->g, &ms) : 0;
    for (size_t i = 0; i < n; i++) {
        const gossip_member *m = ms[i];
        if (m->displaced) continue;
        char *rec = malloc(2 * m->sig.len + 1);
        char sig[2 * GOSSIP_SIG_LEN + 1], wg[KEYS_BASE64_LEN + 1], id[KEYS_BASE64_LEN + 1];
        if (!rec) continue;
        node_hex_encode(m->sig.bytes, m->sig.len, rec);
        node_hex_encode(m->sig.sig, GOSSIP_SIG_LEN, sig);
        keys_to_base64(m->rec.wg_pub, wg);
        keys_to_base64(m->rec.id_pub, id);
        json_array_append_new(
            list, json_pack("{s:s, s:s, s:s, s:s, s:s?, s:s, s:s, s:s}", "name", m->rec.name,
                            "wg_public_key", wg, "id_public_key", id, "overlay_address",
                            m->rec.address, "endpoint",
                            m->rec.nendpoints ? m->rec.endpoints[0] : NULL, "state",
                            gossip_state_name(m->state), "record", rec, "signature", sig));
        json_object_set_new(json_array_get(list, json_array_size(list) - 1), "admission",
                            daemon_adm_json(&m->sig.adm));
        free(rec);
    }
    if (n) json_object_set_new(d->mesh, "members", list);
    else json_decref(list);
    const gossip_member *self = d->g ? gossip_self(d->g) : NULL;
    uint64_t inc = self ? self->rec.incarnation : d->incarnation;
    json_object_set_new(d->mesh, "incarnation", json_integer((json_int_t)inc));
    json_object_set_new(d->mesh, "joined", json_boolean(d->joined));
    if (self) json_object_set_new(d->mesh, "admission", daemon_adm_json(&self->sig.adm));
    if (self && self->rec.left) json_object_set_new(d->mesh, "left", json_true());
    char path[DAEMON_PATH_MAX];
    state_file(path, d->state, "mesh.json");
    return node_write_json(path, d->mesh, 0644, err, errlen);
}

/* ---- invites ---- */

/* The event loop waits for the invites lock at most DAEMON_INVITES_LOCK_MS:
 * `shardnode invite` holds it only while it writes invites.json, and a
 * holder that hangs must not stop the node. */
#define DAEMON_INVITES_LOCK_MS 3000

static int lock_invites(const daemon_t *d)
{
    char path[DAEMON_PATH_MAX];
    state_file(path, d->state, "invites.lock");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fd < 0) return -1;
    for (int waited = 0; fcntl(fd, F_SETLK, &fl) != 0; waited += 10) {
        if ((errno != EACCES && errno != EAGAIN && errno != EINTR) ||
            waited >= DAEMON_INVITES_LOCK_MS) {
            close(fd);
            return -1;
        }
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    return fd;
}

bool daemon_invite_withdrawn(const daemon_invite *iv, int64_t now_s)
{
    if (iv->expires <= now_s) return true;
    return iv->used && (now_s >= iv->used_at + DAEMON_INVITE_GRACE_S || now_s < iv->used_at);
}

void daemon_invites_refresh(daemon_t *d, bool force)
{
    char path[DAEMON_PATH_MAX], err[512];
    state_file(path, d->state, "invites.json");
    struct stat st;
    int64_t mtime = stat(path, &st) == 0
                        ? (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec
                        : 0;
    /* Real time: invites.json's expiry and use are Unix seconds. */
    int64_t now = (int64_t)time(NULL);
    daemon_invite fresh[DAEMON_MAX_INVITES];
    size_t nfresh = 0;
    if (force || mtime != d->invites_mtime_ns) {
        d->invites_mtime_ns = mtime;
        json_t *root = mtime ? node_load_json(path, err, sizeof err) : NULL;
        if (mtime && !root) daemon_log(d, "%s", err);
        json_t *list = json_object_get(root, "invites"), *e;
        size_t i;
        json_array_foreach(list, i, e) {
            const char *hex = node_json_str(e, "secret");
            json_t *exp = json_object_get(e, "expires");
            daemon_invite iv;
            memset(&iv, 0, sizeof iv);
            if (!hex || node_hex_decode(hex, iv.secret, sizeof iv.secret) != 0 ||
                !json_is_integer(exp))
                continue;
            iv.expires = json_integer_value(exp);
            iv.used = node_json_str(e, "used_by") != NULL;
            json_t *at = json_object_get(e, "used_at");
            iv.used_at = json_is_integer(at) ? json_integer_value(at) : 0;
            /* A used invite is withdrawn (issue 12, 6): its holder reached
             * this node only to send JOIN. The grace lets the reply out. */
            if (daemon_invite_withdrawn(&iv, now)) continue;
            if (nfresh == DAEMON_MAX_INVITES) {
                /* `shardnode invite` refuses a 65th; a hand-edited file may hold more. */
                daemon_log(d, "invites.json: more than %d open invites; the later ones are not "
                           "admitted", DAEMON_MAX_INVITES);
                break;
            }
            if (keys_invite_key(iv.secret, sizeof iv.secret, (uint8_t[KEYS_LEN]){0}, iv.pub,
                                err, sizeof err) != 0 ||
                mesh_overlay_address(d->prefix, iv.pub, iv.address, sizeof iv.address, err,
                                     sizeof err) != 0)
                continue;
            if (d->g && gossip_find_addr(d->g, iv.address)) {
                /* WireGuard would give the member's address to the invite. */
                daemon_log(d, "invites.json: an invite's overlay address %s is a member's; "
                           "not admitted (issue a new one)", iv.address);
                continue;
            }
            fresh[nfresh++] = iv;
        }
        json_decref(root);
    } else {
        /* Only expiry (and a used invite's grace) to look at. */
        for (size_t i = 0; i < d->ninvites; i++)
            if (!daemon_invite_withdrawn(&d->invites[i], now)) fresh[nfresh++] = d->invites[i];
        if (nfresh == d->ninvites) return;
    }
    /* Withdraw invites that are gone, add the new ones. */
    for (size_t i = 0; i < d->ninvites; i++) {
        bool keep = false;
        for (size_t j = 0; j < nfresh; j++)
            keep |= memcmp(d->invites[i].pub, fresh[j].pub, GOSSIP_KEY_LEN) == 0;
        if (keep) continue;
        if (d->wg && mesh_wg_remove_peer(d->wg, d->invites[i].pub, err, sizeof err) != 0)
            daemon_log(d, "wireguard: cannot remove an invite's peer: %s", err);
        else
            daemon_log(d, "wireguard: withdrew the invite peer of %s (%s)", d->invites[i].address,
                       d->invites[i].used ? "used" : "expired or gone");
    }
    for (size_t j = 0; j < nfresh; j++) {
        bool had = false;
        for (size_t i = 0; i < d->ninvites; i++)
            had |= memcmp(d->invites[i].pub, fresh[j].pub, GOSSIP_KEY_LEN) == 0;
        if (had) continue;
        char cidr[GOSSIP_ADDR_MAX + 8];
        daemon_host_cidr(fresh[j].address, cidr, sizeof cidr);
        const char *allowed[1] = {cidr};
        if (d->wg && mesh_wg_set_peer(d->wg, fresh[j].pub, NULL, allowed, 1, 0, err, sizeof err) != 0)
            daemon_log(d, "wireguard: cannot add an invite: %s", err);
        else
            daemon_peer_of(d, fresh[j].pub);
    }
    memcpy(d->invites, fresh, nfresh * sizeof *fresh);
    d->ninvites = nfresh;
}

const daemon_invite *daemon_invite_by_address(const daemon_t *d, const char *addr)
{
    for (size_t i = 0; i < d->ninvites; i++)
        if (strcmp(d->invites[i].address, addr) == 0) return &d->invites[i];
    return NULL;
}

int daemon_invite_redeem(daemon_t *d, const uint8_t secret[GOSSIP_SECRET_LEN],
                         const char *name, char *why, size_t whylen, char *err,
                         size_t errlen)
{
    char path[DAEMON_PATH_MAX];
    state_file(path, d->state, "invites.json");
    int fd = lock_invites(d);
    if (fd < 0)
        return node_errf(err, errlen, "%s/invites.lock: cannot lock within %d s (another "
                         "process holds it)", d->state, DAEMON_INVITES_LOCK_MS / 1000);
    int rc = 1;
    json_t *root = node_load_json(path, err, errlen), *list, *e, *hit = NULL;
    char hex[2 * GOSSIP_SECRET_LEN + 1];
    node_hex_encode(secret, GOSSIP_SECRET_LEN, hex);
    size_t i;
    if (!root) {
        rc = -1;
        goto out;
    }
    list = json_object_get(root, "invites");
    json_array_foreach(list, i, e) {
        const char *s = node_json_str(e, "secret");
        if (s && strcmp(s, hex) == 0) hit = e;
    }
    if (!hit) {
        snprintf(why, whylen, "%s has no record of this token (issued by another node, or "
                 "expired and forgotten)", d->name);
        goto out;
    }
    json_t *exp = json_object_get(hit, "expires");
    /* Real time: the expiry is Unix seconds, as the token states it. */
    if (!json_is_integer(exp) || json_integer_value(exp) <= (json_int_t)time(NULL)) {
        snprintf(why, whylen, "token expired");
        goto out;
    }
    const char *by = node_json_str(hit, "used_by");
    if (by) {
        json_t *at = json_object_get(hit, "used_at");
        time_t t = json_is_integer(at) ? (time_t)json_integer_value(at) : 0;
        struct tm tm;
        char ts[32] = "?";
        if (t && gmtime_r(&t, &tm)) strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S UTC", &tm);
        snprintf(why, whylen, "token already used (by %s at %s)", by, ts);
        goto out;
    }
    json_object_set_new(hit, "used_by", json_string(name));
    /* Shown, and read back for the withdrawal grace: real time. */
    json_object_set_new(hit, "used_at", json_integer((json_int_t)time(NULL)));
    rc = node_write_json(path, root, 0600, err, errlen) == 0 ? 0 : -1;
out:
    json_decref(root);
    close(fd);
    return rc;
}

int daemon_peer_key(const char *state, const char *addr, uint8_t key[32], char *err,
                    size_t errlen)
{
    char path[DAEMON_PATH_MAX];
    uint8_t priv[KEYS_LEN], pub[KEYS_LEN];
    if (state_file(path, state, "wg.key") != 0)
        return node_errf(err, errlen, "--state \"%.80s...\": path too long", state);
    if (keys_file_read(path, priv, err, errlen) != 0) return -1;
    state_file(path, state, "mesh.json");
    json_t *mesh = node_load_json(path, err, errlen), *e;
    size_t i;
    if (!mesh) {
        memset(priv, 0, sizeof priv);
        return -1;
    }
    int rc = node_errf(err, errlen, "%s: no member at %s", path, addr);
    json_array_foreach(json_object_get(mesh, "members"), i, e) {
        const char *a = node_json_str(e, "overlay_address"), *k = node_json_str(e, "wg_public_key");
        if (!a || !k || strcmp(a, addr) != 0) continue;
        rc = keys_from_base64(k, pub, err, errlen) == 0 &&
                     gossip_mac_key(priv, pub, key, err, errlen) == 0
                 ? 0
                 : -1;
        break;
    }
    json_decref(mesh);
    memset(priv, 0, sizeof priv);
    return rc;
}

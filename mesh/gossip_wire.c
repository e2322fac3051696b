/* gossip_wire.c — the gossip codec (see mesh.h, "gossip codec", and
 * docs/PROTOCOL.md, "Gossip"): signed member records and the SWIM messages
 * that carry them.
 *
 * The same approach as wire.c: msgpack-c packs (here straight into the
 * caller's fixed buffer, so an oversized message is caught without an
 * allocation), and a small strict reader of our own decodes. Gossip arrives
 * in UDP datagrams from anyone who can reach the overlay port, so the reader
 * bounds every length against the bytes left, refuses every key it does not
 * know and every key a type does not carry, and names the field at fault.
 * The only allocations are the updates array, bounded by GOSSIP_MAX_UPDATES
 * and by the bytes that could hold them, and a FETCH_REPLY's data, bounded
 * by GOSSIP_FETCH_CHUNK and by the bytes actually there. */
#include "keys.h"
#include "mesh.h"
#include "mesh_internal.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(GOSSIP_KEY_LEN == KEYS_LEN, "gossip keys are keys/ keys");
_Static_assert(GOSSIP_SIG_LEN == KEYS_SIG_LEN, "gossip signatures are keys/ signatures");
_Static_assert(MESH_WG_ENDPOINT_MAX == TOKEN_STR_MAX + 1,
               "endpoints follow the token's endpoint rule (token_endpoint_valid)");

/* ------------------------------------------------------------------ keys */

/* Message keys, in the order the encoder writes them ("v" first, as in
 * every version). */
enum {
    M_V, M_T, M_MESH, M_FROM, M_SEQ, M_OBS, M_TARGET, M_TPORT, M_FL, M_SECRET, M_OK,
    M_REASON, M_UP, M_PATH, M_OFF, M_TOTAL, M_DATA, M_COUNT
};
static const char *const msg_keys[M_COUNT] = {
    "v", "t", "mesh", "from", "seq", "obs", "target", "tport", "fl", "secret", "ok",
    "reason", "up", "path", "off", "total", "data",
};

/* Record keys, in the encoder's order; every one is required except "job",
 * which is written only when the text is not empty (missing: ""). */
enum {
    R_MESH, R_NAME, R_WG, R_ID, R_ADDR, R_PORT, R_INC, R_LEFT, R_EP, R_SW, R_PROTO, R_MEM,
    R_DEV, R_T, R_JOB, R_COUNT
};
static const char *const rec_keys[R_COUNT] = {
    "mesh", "name", "wg", "id", "addr", "port", "inc", "left", "ep", "sw", "proto", "mem",
    "dev", "t", "job",
};
#define REC_OPTIONAL KEY(R_JOB)

/* Update keys, in the encoder's order. */
enum { U_S, U_R, U_G, U_A, U_W, U_INC, U_BY, U_COUNT };
static const char *const upd_keys[U_COUNT] = {"s", "r", "g", "a", "w", "inc", "by"};

#define KEY(k) (1u << (k))
#define COMMON (KEY(M_V) | KEY(M_T) | KEY(M_MESH) | KEY(M_FROM))

/* Per type: the keys required, and whether "up" may be there (it is left
 * out when there are no updates, except in JOIN, which always has one). A
 * FETCH_REPLY's keys depend on "ok" (fetch_reply_keys). */
static const struct {
    const char *name;
    uint32_t keys;
    int updates;
} msg_types[] = {
    [GOSSIP_MSG_PING] = {"PING", COMMON | KEY(M_SEQ), 1},
    [GOSSIP_MSG_ACK] = {"ACK", COMMON | KEY(M_SEQ) | KEY(M_OBS), 1},
    [GOSSIP_MSG_PING_REQ] = {"PING_REQ", COMMON | KEY(M_SEQ) | KEY(M_TARGET) | KEY(M_TPORT), 0},
    [GOSSIP_MSG_SYNC] = {"SYNC", COMMON | KEY(M_FL), 1},
    [GOSSIP_MSG_JOIN] = {"JOIN", COMMON | KEY(M_SECRET) | KEY(M_UP), 1},
    [GOSSIP_MSG_JOIN_REPLY] = {"JOIN_REPLY", COMMON | KEY(M_OK) | KEY(M_REASON), 1},
    [GOSSIP_MSG_UPDATE] = {"UPDATE", COMMON, 1},
    [GOSSIP_MSG_FETCH] = {"FETCH", COMMON | KEY(M_PATH) | KEY(M_OFF), 0},
    [GOSSIP_MSG_FETCH_REPLY] = {"FETCH_REPLY", COMMON | KEY(M_OK), 0},
};
#define MSG_TYPE_MAX GOSSIP_MSG_FETCH_REPLY

/* A FETCH_REPLY that serves a part of the file carries "off", "total" and
 * "data"; a refusal carries "reason" instead. */
static uint32_t fetch_reply_keys(int ok)
{
    uint32_t keys = msg_types[GOSSIP_MSG_FETCH_REPLY].keys;
    return ok ? keys | KEY(M_OFF) | KEY(M_TOTAL) | KEY(M_DATA) : keys | KEY(M_REASON);
}

/* The keys a message of this type (and "ok") carries, "up" aside. */
static uint32_t type_keys(gossip_msg_type t, int ok)
{
    return t == GOSSIP_MSG_FETCH_REPLY ? fetch_reply_keys(ok) : msg_types[t].keys;
}

static const char *const state_names[] = {"ALIVE", "SUSPECT", "DEAD", "LEFT"};

/* The keys an update of a state carries. */
static uint32_t update_keys(gossip_state s)
{
    if (s == GOSSIP_ALIVE || s == GOSSIP_LEFT)
        return KEY(U_S) | KEY(U_R) | KEY(U_G);
    return KEY(U_S) | KEY(U_W) | KEY(U_INC) | KEY(U_BY);
}

/* Every update takes more bytes than this (the smallest, a SUSPECT with a
 * one-letter claimant, takes 50), so a count is refused at once when the
 * bytes left could not hold it, before anything is allocated for it. */
#define UPDATE_MIN_BYTES 32

/* "a", the admission, rides beside an ALIVE or LEFT record when it is not
 * all zero (a JOIN's record has none yet). */
static int has_adm(const gossip_admission *a)
{
    static const gossip_admission zero;
    return memcmp(a->by, zero.by, sizeof a->by) != 0 || a->at_ms != 0 ||
           memcmp(a->sig, zero.sig, sizeof a->sig) != 0;
}

static void adm_to_wire(const gossip_admission *a, uint8_t out[GOSSIP_ADM_LEN])
{
    memcpy(out, a->by, GOSSIP_KEY_LEN);
    for (int i = 0; i < 8; i++)
        out[GOSSIP_KEY_LEN + i] = (uint8_t)((uint64_t)a->at_ms >> (56 - 8 * i));
    memcpy(out + GOSSIP_KEY_LEN + 8, a->sig, GOSSIP_SIG_LEN);
}

static void adm_from_wire(const uint8_t in[GOSSIP_ADM_LEN], gossip_admission *a)
{
    uint64_t t = 0;
    memcpy(a->by, in, GOSSIP_KEY_LEN);
    for (int i = 0; i < 8; i++)
        t = t << 8 | in[GOSSIP_KEY_LEN + i];
    a->at_ms = (int64_t)t;
    memcpy(a->sig, in + GOSSIP_KEY_LEN + 8, GOSSIP_SIG_LEN);
}

static int known_type(uint64_t t)
{
    return t >= GOSSIP_MSG_PING && t <= MSG_TYPE_MAX;
}

/* ------------------------------------------------- cursor and messages */

/* A cursor over the bytes (the decoder) or just a place to name things (the
 * encoder's checks). Every message reads "<ctx>: field "<key>": <what>", or
 * "<ctx>: <what>" when no field is being read. */
typedef struct {
    const uint8_t *p, *end;
    char ctx[96];         /* "gossip PING", "gossip record", "record of n1" */
    const char *key;      /* the field being read, or NULL */
    char base[24];        /* "up[3]": the update being read */
    char keybuf[64];      /* "up[3].inc", "ep[1]" */
    char *err;
    size_t errlen;
} cur;

static int cerr(const cur *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int cerr(const cur *c, const char *fmt, ...)
{
    char what[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (c->key)
        return mesh_errf(c->err, c->errlen, "%s: field \"%s\": %s", c->ctx, c->key, what);
    return mesh_errf(c->err, c->errlen, "%s: %s", c->ctx, what);
}

static void cur_init(cur *c, const void *p, size_t len, const char *ctx, char *err,
                     size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->p = p;
    c->end = c->p ? c->p + len : c->p;
    snprintf(c->ctx, sizeof c->ctx, "%s", ctx);
    c->err = err;
    c->errlen = errlen;
}

/* Points key at "ep[3]" or "up[3].s". */
static void key_index(cur *c, const char *name, int i)
{
    snprintf(c->keybuf, sizeof c->keybuf, "%s[%d]", name, i);
    c->key = c->keybuf;
}

static void key_in_update(cur *c, const char *name)
{
    snprintf(c->keybuf, sizeof c->keybuf, "%s.%s", c->base, name);
    c->key = c->keybuf;
}

/* Quotes text from the wire for a message: printable ASCII only, cut short. */
static void quote(const uint8_t *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 4 < cap; i++)
        out[o++] = (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"') ? (char)s[i] : '?';
    if (o + 4 >= cap && n > o)
        out[o++] = '.', out[o++] = '.', out[o++] = '.';
    out[o] = 0;
}

/* ---------------------------------------------------- the field rules */

/* Both sides apply these: the encoder to what it is given, the decoder to
 * what it read, so a node never sends what its peers must refuse. */

static int judge_name(cur *c, const char *s)
{
    size_t n = strlen(s);
    int ok = n >= 1 && n < MESH_NAME_MAX;
    for (size_t i = 0; ok && i < n; i++) {
        char ch = s[i];
        ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
             ch == '.' || ch == '_' || ch == '-';
    }
    if (ok)
        return 0;
    char q[80];
    quote((const uint8_t *)s, n, q, sizeof q);
    return cerr(c, "\"%s\" is not a node name (1 to %d of A-Z a-z 0-9 . _ -)", q,
                MESH_NAME_MAX - 1);
}

static int judge_address(cur *c, const char *s)
{
    uint8_t raw[16];
    if (inet_pton(AF_INET, s, raw) == 1 || inet_pton(AF_INET6, s, raw) == 1)
        return 0;
    char q[80];
    quote((const uint8_t *)s, strlen(s), q, sizeof q);
    return cerr(c, "\"%s\" is not an IPv4 or IPv6 address", q);
}

static int judge_endpoint(cur *c, const char *s, int empty_ok)
{
    if ((empty_ok && !s[0]) || token_endpoint_valid(s))
        return 0;
    char q[80];
    quote((const uint8_t *)s, strlen(s), q, sizeof q);
    return cerr(c, "\"%s\" is not an endpoint (host:port or [IPv6]:port)", q);
}

/* FETCH's path: 1 to GOSSIP_PATH_MAX - 1 bytes of printable ASCII. What
 * the path may name is the serving node's business. */
static int judge_path(cur *c, const char *s)
{
    size_t n = strlen(s);
    int ok = n >= 1 && n < GOSSIP_PATH_MAX;
    for (size_t i = 0; ok && i < n; i++)
        ok = s[i] >= 0x20 && s[i] < 0x7f;
    if (ok)
        return 0;
    char q[80];
    quote((const uint8_t *)s, n, q, sizeof q);
    return cerr(c, "\"%s\" is not a path (1 to %d bytes of printable ASCII)", q,
                GOSSIP_PATH_MAX - 1);
}

/* A FETCH_REPLY's part of the file: data_len bytes at offset within total. */
static int judge_part(cur *c, uint64_t offset, size_t data_len, uint64_t total)
{
    if ((uint64_t)data_len > total || offset > total - (uint64_t)data_len)
        return cerr(c, "%zu bytes at offset %" PRIu64 " end past the file's %" PRIu64
                       " bytes (\"total\")",
                    data_len, offset, total);
    return 0;
}

/* A C string field of the caller's struct: it must end within its array. */
static int check_str(cur *c, const char *s, size_t cap)
{
    if (!memchr(s, 0, cap))
        return cerr(c, "is longer than %zu bytes", cap - 1);
    return 0;
}

/* ------------------------------------------------------ encoder checks */

/* Checks a record the decoder would accept; sets c->ctx to "record of NAME"
 * once the name is known to be good. */
static int check_record(cur *c, const gossip_record *r)
{
    c->key = rec_keys[R_NAME];
    if (check_str(c, r->name, MESH_NAME_MAX) || judge_name(c, r->name))
        return -1;
    snprintf(c->ctx, sizeof c->ctx, "record of %s", r->name);
    c->key = rec_keys[R_ADDR];
    if (check_str(c, r->address, GOSSIP_ADDR_MAX) || judge_address(c, r->address))
        return -1;
    c->key = rec_keys[R_PORT];
    if (r->port == 0)
        return cerr(c, "is 0, expected 1 to 65535");
    c->key = rec_keys[R_LEFT];
    if (r->left > 1)
        return cerr(c, "is %u, expected 0 or 1", (unsigned)r->left);
    c->key = rec_keys[R_EP];
    if (r->nendpoints < 0 || r->nendpoints > GOSSIP_MAX_ENDPOINTS)
        return cerr(c, "%d endpoints, expected 0 to %d", r->nendpoints, GOSSIP_MAX_ENDPOINTS);
    for (int i = 0; i < r->nendpoints; i++) {
        key_index(c, rec_keys[R_EP], i);
        if (check_str(c, r->endpoints[i], MESH_WG_ENDPOINT_MAX) ||
            judge_endpoint(c, r->endpoints[i], 0))
            return -1;
    }
    c->key = rec_keys[R_SW];
    if (check_str(c, r->software, GOSSIP_SOFTWARE_MAX))
        return -1;
    c->key = rec_keys[R_DEV];
    if (check_str(c, r->devices, GOSSIP_DEVICES_MAX))
        return -1;
    c->key = rec_keys[R_JOB];
    if (check_str(c, r->job, GOSSIP_JOB_MAX))
        return -1;
    c->key = NULL;
    return 0;
}

static int check_update(cur *c, int i, const gossip_update *u)
{
    snprintf(c->base, sizeof c->base, "up[%d]", i);
    key_in_update(c, upd_keys[U_S]);
    if ((unsigned)u->state > GOSSIP_LEFT)
        return cerr(c, "is %d, not a state (0 ALIVE, 1 SUSPECT, 2 DEAD, 3 LEFT)",
                    (int)u->state);
    if (u->state == GOSSIP_ALIVE || u->state == GOSSIP_LEFT) {
        key_in_update(c, upd_keys[U_R]);
        if (u->rec.len < 1 || u->rec.len > GOSSIP_RECORD_MAX)
            return cerr(c, "record of %zu bytes, expected 1 to %d", u->rec.len,
                        GOSSIP_RECORD_MAX);
    } else {
        key_in_update(c, upd_keys[U_BY]);
        if (check_str(c, u->from, MESH_NAME_MAX) || judge_name(c, u->from))
            return -1;
    }
    return 0;
}

static int check_msg(cur *c, const gossip_msg *m)
{
    uint32_t keys = type_keys(m->type, m->ok);
    c->key = msg_keys[M_FROM];
    if (check_str(c, m->from, MESH_NAME_MAX) || judge_name(c, m->from))
        return -1;
    if (keys & KEY(M_OBS)) {
        c->key = msg_keys[M_OBS];
        if (check_str(c, m->observed, MESH_WG_ENDPOINT_MAX) || judge_endpoint(c, m->observed, 1))
            return -1;
    }
    if (keys & KEY(M_TARGET)) {
        c->key = msg_keys[M_TARGET];
        if (check_str(c, m->target, GOSSIP_ADDR_MAX) || judge_address(c, m->target))
            return -1;
        c->key = msg_keys[M_TPORT];
        if (m->target_port == 0)
            return cerr(c, "is 0, expected 1 to 65535");
    }
    if (keys & KEY(M_FL)) {
        c->key = msg_keys[M_FL];
        if (m->flags & ~GOSSIP_SYNC_REPLY)
            return cerr(c, "has unknown bits 0x%" PRIx32 " (bit 0, GOSSIP_SYNC_REPLY, is the only one)",
                        m->flags & ~GOSSIP_SYNC_REPLY);
    }
    if (keys & KEY(M_OK)) {
        c->key = msg_keys[M_OK];
        if (m->ok > 1)
            return cerr(c, "is %u, expected 0 or 1", (unsigned)m->ok);
    }
    if (keys & KEY(M_REASON)) {
        c->key = msg_keys[M_REASON];
        if (check_str(c, m->reason, MESH_TEXT_MAX))
            return -1;
    }
    if (keys & KEY(M_PATH)) {
        c->key = msg_keys[M_PATH];
        if (check_str(c, m->path, GOSSIP_PATH_MAX) || judge_path(c, m->path))
            return -1;
    }
    if (m->type == GOSSIP_MSG_FETCH_REPLY && m->ok) {
        c->key = msg_keys[M_REASON];
        if (!memchr(m->reason, 0, MESH_TEXT_MAX) || m->reason[0])
            return cerr(c, "a FETCH_REPLY that is ok carries no reason");
        c->key = msg_keys[M_DATA];
        if (m->data_len > GOSSIP_FETCH_CHUNK)
            return cerr(c, "%zu bytes, at most %u (GOSSIP_FETCH_CHUNK)", m->data_len,
                        GOSSIP_FETCH_CHUNK);
        if (m->data_len && !m->data)
            return cerr(c, "is NULL with %zu bytes", m->data_len);
        if (judge_part(c, m->offset, m->data_len, m->total))
            return -1;
    } else if (m->type == GOSSIP_MSG_FETCH_REPLY) {
        c->key = msg_keys[M_DATA];
        if (m->data_len || m->offset || m->total)
            return cerr(c, "a FETCH_REPLY that refuses carries no data, offset or total");
    }
    c->key = msg_keys[M_UP];
    if (m->nupdates < 0 || m->nupdates > GOSSIP_MAX_UPDATES)
        return cerr(c, "%d updates, expected 0 to %d", m->nupdates, GOSSIP_MAX_UPDATES);
    if (m->nupdates && !msg_types[m->type].updates)
        return cerr(c, "a %s carries no updates, got %d", msg_types[m->type].name,
                    m->nupdates);
    if (m->nupdates && !m->updates)
        return cerr(c, "is NULL with %d updates", m->nupdates);
    if (m->type == GOSSIP_MSG_JOIN && m->nupdates != 1)
        return cerr(c, "a JOIN carries exactly one update (the joiner's ALIVE record), got %d",
                    m->nupdates);
    for (int i = 0; i < m->nupdates; i++)
        if (check_update(c, i, &m->updates[i]))
            return -1;
    if (m->type == GOSSIP_MSG_JOIN && m->updates[0].state != GOSSIP_ALIVE) {
        c->key = "up[0].s";
        return cerr(c, "a JOIN's update must be ALIVE, got %s", state_names[m->updates[0].state]);
    }
    c->key = NULL;
    return 0;
}

/* ---------------------------------------------------------------- packer */

/* msgpack-c writes into the caller's buffer; past its end bytes are only
 * counted, so the message can say how many it needed. */
typedef struct {
    uint8_t *buf;
    size_t cap, len;
} fixbuf;

static int fixbuf_write(void *data, const char *b, size_t n)
{
    fixbuf *f = data;
    if (n && f->len <= f->cap && n <= f->cap - f->len)
        memcpy(f->buf + f->len, b, n);
    f->len += n;
    return 0;
}

static int pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    return msgpack_pack_str(pk, n) | msgpack_pack_str_body(pk, s, n);
}

static int pack_bin(msgpack_packer *pk, const void *p, size_t n)
{
    return msgpack_pack_bin(pk, n) | msgpack_pack_bin_body(pk, p, n);
}

static int pack_record(msgpack_packer *pk, const gossip_record *r)
{
    int has_job = r->job[0] != 0;
    int rc = msgpack_pack_map(pk, has_job ? R_COUNT : R_COUNT - 1);
    for (int k = 0; k < R_COUNT; k++) {
        if (k == R_JOB && !has_job)
            continue;
        rc |= pack_str(pk, rec_keys[k]);
        switch (k) {
        case R_MESH: rc |= pack_bin(pk, r->mesh_id, GOSSIP_MESH_ID_LEN); break;
        case R_NAME: rc |= pack_str(pk, r->name); break;
        case R_WG: rc |= pack_bin(pk, r->wg_pub, GOSSIP_KEY_LEN); break;
        case R_ID: rc |= pack_bin(pk, r->id_pub, GOSSIP_KEY_LEN); break;
        case R_ADDR: rc |= pack_str(pk, r->address); break;
        case R_PORT: rc |= msgpack_pack_uint16(pk, r->port); break;
        case R_INC: rc |= msgpack_pack_uint64(pk, r->incarnation); break;
        case R_LEFT: rc |= r->left ? msgpack_pack_true(pk) : msgpack_pack_false(pk); break;
        case R_EP:
            rc |= msgpack_pack_array(pk, (size_t)r->nendpoints);
            for (int i = 0; i < r->nendpoints; i++)
                rc |= pack_str(pk, r->endpoints[i]);
            break;
        case R_SW: rc |= pack_str(pk, r->software); break;
        case R_PROTO: rc |= msgpack_pack_uint32(pk, r->protocol); break;
        case R_MEM: rc |= msgpack_pack_uint64(pk, r->mem_free); break;
        case R_DEV: rc |= pack_str(pk, r->devices); break;
        case R_T: rc |= msgpack_pack_int64(pk, r->signed_ms); break;
        case R_JOB: rc |= pack_str(pk, r->job); break;
        }
    }
    return rc;
}

static int pack_update(msgpack_packer *pk, const gossip_update *u)
{
    uint32_t keys = update_keys(u->state);
    if ((keys & KEY(U_R)) && has_adm(&u->rec.adm))
        keys |= KEY(U_A);
    uint8_t adm[GOSSIP_ADM_LEN];
    adm_to_wire(&u->rec.adm, adm);
    int rc = msgpack_pack_map(pk, (size_t)__builtin_popcount(keys));
    for (int k = 0; k < U_COUNT; k++) {
        if (!(keys & KEY(k)))
            continue;
        rc |= pack_str(pk, upd_keys[k]);
        switch (k) {
        case U_S: rc |= msgpack_pack_uint32(pk, (uint32_t)u->state); break;
        case U_R: rc |= pack_bin(pk, u->rec.bytes, u->rec.len); break;
        case U_G: rc |= pack_bin(pk, u->rec.sig, GOSSIP_SIG_LEN); break;
        case U_A: rc |= pack_bin(pk, adm, GOSSIP_ADM_LEN); break;
        case U_W: rc |= pack_bin(pk, u->wg_pub, GOSSIP_KEY_LEN); break;
        case U_INC: rc |= msgpack_pack_uint64(pk, u->incarnation); break;
        case U_BY: rc |= pack_str(pk, u->from); break;
        }
    }
    return rc;
}

int gossip_encode(const gossip_msg *m, uint8_t *buf, size_t cap, size_t *len, char *err,
                  size_t errlen)
{
    cur c;
    cur_init(&c, NULL, 0, "gossip message", err, errlen);
    *len = 0;
    if (!known_type((uint64_t)m->type)) {
        c.key = msg_keys[M_T];
        return cerr(&c, "is %d, not a gossip message type (1 to %d)", (int)m->type,
                    MSG_TYPE_MAX);
    }
    snprintf(c.ctx, sizeof c.ctx, "gossip %s", msg_types[m->type].name);
    if (check_msg(&c, m))
        return -1;

    uint32_t keys = type_keys(m->type, m->ok);
    if (m->nupdates)
        keys |= KEY(M_UP);
    fixbuf fb = {buf, cap, 0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &fb, fixbuf_write);
    int rc = msgpack_pack_map(&pk, (size_t)__builtin_popcount(keys));
    for (int k = 0; k < M_COUNT; k++) {
        if (!(keys & KEY(k)))
            continue;
        rc |= pack_str(&pk, msg_keys[k]);
        switch (k) {
        case M_V: rc |= msgpack_pack_uint32(&pk, MESH_PROTOCOL_VERSION); break;
        case M_T: rc |= msgpack_pack_uint32(&pk, (uint32_t)m->type); break;
        case M_MESH: rc |= pack_bin(&pk, m->mesh_id, GOSSIP_MESH_ID_LEN); break;
        case M_FROM: rc |= pack_str(&pk, m->from); break;
        case M_SEQ: rc |= msgpack_pack_uint32(&pk, m->seq); break;
        case M_OBS: rc |= pack_str(&pk, m->observed); break;
        case M_TARGET: rc |= pack_str(&pk, m->target); break;
        case M_TPORT: rc |= msgpack_pack_uint16(&pk, m->target_port); break;
        case M_FL: rc |= msgpack_pack_uint32(&pk, m->flags); break;
        case M_SECRET: rc |= pack_bin(&pk, m->secret, GOSSIP_SECRET_LEN); break;
        case M_OK: rc |= m->ok ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk); break;
        case M_REASON: rc |= pack_str(&pk, m->reason); break;
        case M_UP:
            rc |= msgpack_pack_array(&pk, (size_t)m->nupdates);
            for (int i = 0; i < m->nupdates; i++)
                rc |= pack_update(&pk, &m->updates[i]);
            break;
        case M_PATH: rc |= pack_str(&pk, m->path); break;
        case M_OFF: rc |= msgpack_pack_uint64(&pk, m->offset); break;
        case M_TOTAL: rc |= msgpack_pack_uint64(&pk, m->total); break;
        case M_DATA: rc |= pack_bin(&pk, m->data, m->data_len); break;
        }
    }
    if (rc)
        return cerr(&c, "msgpack-c failed to pack the message");
    if (fb.len > cap)
        return cerr(&c, "the message (%zu bytes) does not fit in %zu bytes", fb.len, cap);
    *len = fb.len;
    return 0;
}

int gossip_record_sign(const gossip_record *r, const uint8_t id_priv[GOSSIP_KEY_LEN],
                       gossip_signed *out, char *err, size_t errlen)
{
    cur c;
    cur_init(&c, NULL, 0, "gossip record", err, errlen);
    memset(out, 0, sizeof *out);
    if (check_record(&c, r))
        return -1;
    uint8_t pub[KEYS_LEN];
    char kerr[192] = "";
    if (keys_ed25519_public(id_priv, pub, kerr, sizeof kerr) != 0)
        return cerr(&c, "%s", kerr);
    if (memcmp(pub, r->id_pub, KEYS_LEN) != 0)
        return cerr(&c, "the signing key is not the private key of the record's \"id\" "
                        "(its identity key): refusing to sign");
    fixbuf fb = {out->bytes, sizeof out->bytes, 0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &fb, fixbuf_write);
    if (pack_record(&pk, r) != 0) {
        memset(out, 0, sizeof *out);
        return cerr(&c, "msgpack-c failed to pack the record");
    }
    if (fb.len > sizeof out->bytes) {
        memset(out, 0, sizeof *out);
        return cerr(&c, "the record (%zu bytes) does not fit in %d bytes", fb.len,
                    GOSSIP_RECORD_MAX);
    }
    if (keys_sign(id_priv, out->bytes, fb.len, out->sig, kerr, sizeof kerr) != 0) {
        memset(out, 0, sizeof *out);
        return cerr(&c, "%s", kerr);
    }
    out->len = fb.len;
    return 0;
}

/* ---------------------------------------------------------------- reader */

/* Every read first checks that the bytes are there. Out-values are
 * initialised at their declarations because gcc -O3 cannot see that cerr
 * always returns -1. */

static size_t left(const cur *r)
{
    return (size_t)(r->end - r->p);
}

static int need(cur *r, size_t n)
{
    if (left(r) >= n)
        return 0;
    return cerr(r, "the bytes end inside %s", r->key ? "it" : "the map");
}

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* An n-byte big-endian length or integer. */
static int read_be(cur *r, int n, uint64_t *out)
{
    if (need(r, (size_t)n))
        return -1;
    *out = be(r->p, n);
    r->p += n;
    return 0;
}

static const char *kind_name(uint8_t b)
{
    if (b <= 0x7f || b >= 0xe0 || (b >= 0xcc && b <= 0xd3))
        return "an integer";
    if (b <= 0x8f || b == 0xde || b == 0xdf)
        return "a map";
    if (b <= 0x9f || b == 0xdc || b == 0xdd)
        return "an array";
    if (b <= 0xbf || (b >= 0xd9 && b <= 0xdb))
        return "a string";
    switch (b) {
    case 0xc0: return "nil";
    case 0xc1: return "the never-used byte 0xc1";
    case 0xc2:
    case 0xc3: return "a boolean";
    case 0xc4:
    case 0xc5:
    case 0xc6: return "a bin";
    case 0xca:
    case 0xcb: return "a float";
    }
    return "an ext";
}

static int wrong_kind(cur *r, const char *want, uint8_t b)
{
    return cerr(r, "expected %s, got %s", want, kind_name(b));
}

/* An integer of any msgpack width, as sign and magnitude. */
typedef struct {
    int neg;
    uint64_t u; /* when !neg */
    int64_t i;  /* when neg */
} wire_int;

static int read_int(cur *r, const char *want, wire_int *v)
{
    if (need(r, 1))
        return -1;
    uint8_t b = *r->p;
    v->neg = 0;
    if (b <= 0x7f) {
        r->p++;
        v->u = b;
        return 0;
    }
    if (b >= 0xe0) {
        r->p++;
        v->neg = 1;
        v->i = (int8_t)b;
        return 0;
    }
    if (b >= 0xcc && b <= 0xcf) {
        r->p++;
        return read_be(r, 1 << (b - 0xcc), &v->u);
    }
    if (b >= 0xd0 && b <= 0xd3) {
        int n = 1 << (b - 0xd0);
        uint64_t raw = 0;
        r->p++;
        if (read_be(r, n, &raw))
            return -1;
        int64_t s;
        switch (n) {
        case 1: s = (int8_t)(uint8_t)raw; break;
        case 2: s = (int16_t)(uint16_t)raw; break;
        case 4: s = (int32_t)(uint32_t)raw; break;
        default: s = (int64_t)raw; break;
        }
        if (s < 0)
            v->neg = 1, v->i = s;
        else
            v->u = (uint64_t)s;
        return 0;
    }
    return wrong_kind(r, want, b);
}

static int read_uint(cur *r, uint64_t min, uint64_t max, uint64_t *out)
{
    wire_int v = {0, 0, 0};
    if (read_int(r, "an unsigned integer", &v))
        return -1;
    if (v.neg)
        return cerr(r, "expected an unsigned integer, got %" PRId64, v.i);
    if (v.u < min || v.u > max)
        return cerr(r, "is %" PRIu64 ", expected %" PRIu64 " to %" PRIu64, v.u, min, max);
    *out = v.u;
    return 0;
}

static int read_i64(cur *r, int64_t *out)
{
    wire_int v = {0, 0, 0};
    if (read_int(r, "an integer", &v))
        return -1;
    if (v.neg) {
        *out = v.i;
        return 0;
    }
    if (v.u > INT64_MAX)
        return cerr(r, "is %" PRIu64 ", at most %" PRId64, v.u, INT64_MAX);
    *out = (int64_t)v.u;
    return 0;
}

/* A boolean; with ints_too, the integers 0 and 1 as well. */
static int read_bool(cur *r, int ints_too, uint8_t *out)
{
    if (need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b == 0xc2 || b == 0xc3) {
        r->p++;
        *out = b == 0xc3;
        return 0;
    }
    if (!ints_too)
        return wrong_kind(r, "a boolean", b);
    wire_int v = {0, 0, 0};
    if (read_int(r, "a boolean or 0/1", &v))
        return -1;
    if (v.neg || v.u > 1)
        return cerr(r, "expected a boolean or 0/1, got %s%" PRIu64, v.neg ? "-" : "",
                    v.neg ? (uint64_t)0 - (uint64_t)v.i : v.u);
    *out = (uint8_t)v.u;
    return 0;
}

/* A str's header: its length, the bytes themselves still to be consumed. */
static int read_str_len(cur *r, uint64_t *len)
{
    if (need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b >= 0xa0 && b <= 0xbf) {
        r->p++;
        *len = b & 0x1f;
        return 0;
    }
    if (b >= 0xd9 && b <= 0xdb) {
        r->p++;
        return read_be(r, 1 << (b - 0xd9), len);
    }
    return wrong_kind(r, "a string", b);
}

static int read_str(cur *r, char *dst, size_t cap)
{
    uint64_t n = 0;
    if (read_str_len(r, &n))
        return -1;
    if (n > cap - 1)
        return cerr(r, "is %" PRIu64 " bytes, at most %zu", n, cap - 1);
    if (need(r, (size_t)n))
        return -1;
    /* C strings end at the first NUL: a name with one inside would be read
     * as another name. */
    if (memchr(r->p, 0, (size_t)n))
        return cerr(r, "contains a NUL byte");
    memcpy(dst, r->p, (size_t)n);
    dst[n] = 0;
    r->p += n;
    return 0;
}

/* A bin of min..max bytes, copied into dst. */
static int read_bin(cur *r, void *dst, size_t min, size_t max, size_t *len)
{
    if (need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b < 0xc4 || b > 0xc6)
        return wrong_kind(r, "a bin", b);
    r->p++;
    uint64_t n = 0;
    if (read_be(r, 1 << (b - 0xc4), &n))
        return -1;
    if (n < min || n > max) {
        if (min == max)
            return cerr(r, "is a bin of %" PRIu64 " bytes, expected %zu", n, min);
        return cerr(r, "is a bin of %" PRIu64 " bytes, expected %zu to %zu", n, min, max);
    }
    if (need(r, (size_t)n))
        return -1;
    memcpy(dst, r->p, (size_t)n);
    r->p += n;
    if (len)
        *len = (size_t)n;
    return 0;
}

static int read_array_len(cur *r, uint64_t *len)
{
    if (need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b >= 0x90 && b <= 0x9f) {
        r->p++;
        *len = b & 0x0f;
        return 0;
    }
    if (b == 0xdc || b == 0xdd) {
        r->p++;
        return read_be(r, b == 0xdc ? 2 : 4, len);
    }
    return wrong_kind(r, "an array", b);
}

static int read_map_len(cur *r, uint64_t *len)
{
    if (need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b >= 0x80 && b <= 0x8f) {
        r->p++;
        *len = b & 0x0f;
        return 0;
    }
    if (b == 0xde || b == 0xdf) {
        r->p++;
        return read_be(r, b == 0xde ? 2 : 4, len);
    }
    return wrong_kind(r, "a map", b);
}

/* A map key from names[0..count). `where` is the field the map is (NULL
 * for the top level), for the messages about the key itself. */
static int read_key(cur *r, const char *const *names, int count, const char *where, int *k)
{
    uint64_t n = 0;
    r->key = where;
    if (need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b < 0xa0 || (b > 0xbf && (b < 0xd9 || b > 0xdb)))
        return cerr(r, "map keys must be strings, got %s", kind_name(b));
    if (read_str_len(r, &n) || need(r, (size_t)n))
        return -1;
    for (int i = 0; i < count; i++) {
        if (strlen(names[i]) == n && memcmp(names[i], r->p, (size_t)n) == 0) {
            r->p += n;
            *k = i;
            if (where)
                key_in_update(r, names[i]);
            else
                r->key = names[i];
            return 0;
        }
    }
    char q[40];
    quote(r->p, (size_t)n, q, sizeof q);
    return cerr(r, "unknown key \"%s\"", q);
}

/* Skips one value of any msgpack kind, for the pre-scan only. Work is
 * bounded by the bytes (every element takes at least one) and the depth. */
static int skip_any(cur *r, int depth)
{
    if (depth > 32 || left(r) < 1)
        return -1;
    uint8_t b = *r->p++;
    uint64_t n = 0, count = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        return 0;
    if (b <= 0x8f)
        count = 2 * (uint64_t)(b & 0x0f);
    else if (b <= 0x9f)
        count = b & 0x0f;
    else if (b <= 0xbf)
        n = b & 0x1f;
    else if (b >= 0xcc && b <= 0xcf)
        n = (uint64_t)1 << (b - 0xcc);
    else if (b >= 0xd0 && b <= 0xd3)
        n = (uint64_t)1 << (b - 0xd0);
    else if (b >= 0xd4 && b <= 0xd8)
        n = 1 + ((uint64_t)1 << (b - 0xd4)); /* fixext: type byte + data */
    else if (b == 0xca)
        n = 4;
    else if (b == 0xcb)
        n = 8;
    else if (b >= 0xc4 && b <= 0xc6) {
        if (read_be(r, 1 << (b - 0xc4), &n))
            return -1;
    } else if (b >= 0xc7 && b <= 0xc9) {
        if (read_be(r, 1 << (b - 0xc7), &n))
            return -1;
        n += 1; /* the ext type byte */
    } else if (b >= 0xd9 && b <= 0xdb) {
        if (read_be(r, 1 << (b - 0xd9), &n))
            return -1;
    } else if (b == 0xdc || b == 0xdd) {
        if (read_be(r, b == 0xdc ? 2 : 4, &count))
            return -1;
    } else if (b == 0xde || b == 0xdf) {
        if (read_be(r, b == 0xde ? 2 : 4, &count))
            return -1;
        count *= 2;
    } else {
        return -1; /* 0xc1 */
    }
    if (left(r) < n)
        return -1;
    r->p += n;
    for (uint64_t i = 0; i < count; i++)
        if (skip_any(r, depth + 1))
            return -1;
    return 0;
}

/* Looks for "v" and "t" at the top level before anything is judged: a node
 * of another protocol version is told so, not about a key or type it cannot
 * know, and the messages of the strict pass can name the type. Silent: the
 * strict pass says what is wrong with whatever this cannot read. */
static void peek(const uint8_t *p, size_t len, int *has_v, uint64_t *v, int *has_t,
                 uint64_t *t)
{
    cur r;
    cur_init(&r, p, len, "", NULL, 0);
    *has_v = *has_t = 0;
    uint64_t n = 0;
    if (len < 1 || read_map_len(&r, &n))
        return;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t klen = 0;
        if (read_str_len(&r, &klen) || left(&r) < klen)
            return;
        int which = klen == 1 && r.p[0] == 'v' ? 1 : klen == 1 && r.p[0] == 't' ? 2 : 0;
        r.p += klen;
        if (which) {
            wire_int w = {0, 0, 0};
            if (read_int(&r, "", &w) || w.neg)
                return;
            if (which == 1 && !*has_v)
                *has_v = 1, *v = w.u;
            if (which == 2 && !*has_t)
                *has_t = 1, *t = w.u;
        } else if (skip_any(&r, 0)) {
            return;
        }
    }
}

/* ---------------------------------------------------------------- record */

static int read_record_value(cur *r, int k, gossip_record *rec)
{
    uint64_t u = 0;
    switch (k) {
    case R_MESH: return read_bin(r, rec->mesh_id, GOSSIP_MESH_ID_LEN, GOSSIP_MESH_ID_LEN, NULL);
    case R_NAME:
        if (read_str(r, rec->name, sizeof rec->name) || judge_name(r, rec->name))
            return -1;
        snprintf(r->ctx, sizeof r->ctx, "record of %s", rec->name);
        return 0;
    case R_WG: return read_bin(r, rec->wg_pub, GOSSIP_KEY_LEN, GOSSIP_KEY_LEN, NULL);
    case R_ID: return read_bin(r, rec->id_pub, GOSSIP_KEY_LEN, GOSSIP_KEY_LEN, NULL);
    case R_ADDR:
        return read_str(r, rec->address, sizeof rec->address) || judge_address(r, rec->address)
                   ? -1
                   : 0;
    case R_PORT:
        if (read_uint(r, 1, 65535, &u))
            return -1;
        rec->port = (uint16_t)u;
        return 0;
    case R_INC: return read_uint(r, 0, UINT64_MAX, &rec->incarnation);
    case R_LEFT: return read_bool(r, 1, &rec->left);
    case R_EP: {
        uint64_t n = 0;
        if (read_array_len(r, &n))
            return -1;
        if (n > GOSSIP_MAX_ENDPOINTS)
            return cerr(r, "%" PRIu64 " endpoints, at most %d", n, GOSSIP_MAX_ENDPOINTS);
        for (int i = 0; i < (int)n; i++) {
            key_index(r, rec_keys[R_EP], i);
            if (read_str(r, rec->endpoints[i], MESH_WG_ENDPOINT_MAX) ||
                judge_endpoint(r, rec->endpoints[i], 0))
                return -1;
        }
        rec->nendpoints = (int)n;
        return 0;
    }
    case R_SW: return read_str(r, rec->software, sizeof rec->software);
    case R_PROTO:
        if (read_uint(r, 0, UINT32_MAX, &u))
            return -1;
        rec->protocol = (uint32_t)u;
        return 0;
    case R_MEM: return read_uint(r, 0, UINT64_MAX, &rec->mem_free);
    case R_DEV: return read_str(r, rec->devices, sizeof rec->devices);
    case R_T: return read_i64(r, &rec->signed_ms);
    case R_JOB: return read_str(r, rec->job, sizeof rec->job);
    }
    return -1;
}

static int decode_record(const uint8_t *p, size_t len, gossip_record *rec, char *err,
                         size_t errlen)
{
    cur r;
    cur_init(&r, p, len, "gossip record", err, errlen);
    if (len < 1 || len > GOSSIP_RECORD_MAX)
        return cerr(&r, "%zu bytes, expected 1 to %d", len, GOSSIP_RECORD_MAX);
    uint64_t n = 0;
    if (read_map_len(&r, &n))
        return -1;
    if (n > R_COUNT)
        return cerr(&r, "map has %" PRIu64 " keys, a record has at most %d", n, R_COUNT);
    uint32_t seen = 0;
    for (uint64_t i = 0; i < n; i++) {
        int k = 0;
        if (read_key(&r, rec_keys, R_COUNT, NULL, &k))
            return -1;
        if (seen & KEY(k)) {
            r.key = NULL;
            return cerr(&r, "duplicate key \"%s\"", rec_keys[k]);
        }
        seen |= KEY(k);
        if (read_record_value(&r, k, rec))
            return -1;
    }
    r.key = NULL;
    if (r.p != r.end)
        return cerr(&r, "%zu trailing byte%s after the map", left(&r), left(&r) == 1 ? "" : "s");
    for (int k = 0; k < R_COUNT; k++)
        if (!(seen & KEY(k)) && !(REC_OPTIONAL & KEY(k)))
            return cerr(&r, "missing key \"%s\"", rec_keys[k]);
    return 0;
}

int gossip_record_open(const gossip_signed *s, gossip_record *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (decode_record(s->bytes, s->len, r, err, errlen)) {
        memset(r, 0, sizeof *r);
        return -1;
    }
    if (!keys_verify(r->id_pub, s->bytes, s->len, s->sig)) {
        mesh_errf(err, errlen, "record of %s: signature does not verify", r->name);
        memset(r, 0, sizeof *r);
        return -1;
    }
    return 0;
}

/* --------------------------------------------------------------- message */

static int read_update(cur *r, int i, gossip_update *u)
{
    snprintf(r->base, sizeof r->base, "up[%d]", i);
    r->key = r->base;
    uint64_t n = 0, v = 0;
    if (read_map_len(r, &n))
        return -1;
    if (n > U_COUNT)
        return cerr(r, "map has %" PRIu64 " keys, an update has at most 5", n);
    uint32_t seen = 0;
    for (uint64_t j = 0; j < n; j++) {
        int k = 0;
        if (read_key(r, upd_keys, U_COUNT, r->base, &k))
            return -1;
        if (seen & KEY(k)) {
            r->key = r->base;
            return cerr(r, "duplicate key \"%s\"", upd_keys[k]);
        }
        seen |= KEY(k);
        int rc = 0;
        switch (k) {
        case U_S:
            rc = read_uint(r, 0, GOSSIP_LEFT, &v);
            u->state = (gossip_state)v;
            break;
        case U_R:
            rc = read_bin(r, u->rec.bytes, 1, GOSSIP_RECORD_MAX, &u->rec.len);
            break;
        case U_G: rc = read_bin(r, u->rec.sig, GOSSIP_SIG_LEN, GOSSIP_SIG_LEN, NULL); break;
        case U_A: {
            uint8_t adm[GOSSIP_ADM_LEN];
            rc = read_bin(r, adm, GOSSIP_ADM_LEN, GOSSIP_ADM_LEN, NULL);
            if (rc == 0)
                adm_from_wire(adm, &u->rec.adm);
            break;
        }
        case U_W: rc = read_bin(r, u->wg_pub, GOSSIP_KEY_LEN, GOSSIP_KEY_LEN, NULL); break;
        case U_INC: rc = read_uint(r, 0, UINT64_MAX, &u->incarnation); break;
        case U_BY:
            rc = read_str(r, u->from, sizeof u->from) || judge_name(r, u->from) ? -1 : 0;
            break;
        }
        if (rc)
            return -1;
    }
    r->key = r->base;
    if (!(seen & KEY(U_S)))
        return cerr(r, "missing key \"s\"");
    uint32_t required = update_keys(u->state);
    uint32_t allowed = required | ((required & KEY(U_R)) ? KEY(U_A) : 0);
    for (int k = 0; k < U_COUNT; k++) {
        if ((seen & KEY(k)) && !(allowed & KEY(k)))
            return cerr(r, "key \"%s\" is not allowed when \"s\" is %s", upd_keys[k],
                        state_names[u->state]);
        if (!(seen & KEY(k)) && (required & KEY(k)))
            return cerr(r, "missing key \"%s\" (\"s\" is %s)", upd_keys[k],
                        state_names[u->state]);
    }
    return 0;
}

static int read_updates(cur *r, gossip_msg *m)
{
    uint64_t n = 0;
    if (read_array_len(r, &n))
        return -1;
    if (n > GOSSIP_MAX_UPDATES)
        return cerr(r, "%" PRIu64 " updates, at most %d", n, GOSSIP_MAX_UPDATES);
    if (n > left(r) / UPDATE_MIN_BYTES)
        return cerr(r, "the bytes end inside it (%" PRIu64 " updates in %zu bytes)", n,
                    left(r));
    if (n == 0)
        return 0;
    m->updates = calloc((size_t)n, sizeof *m->updates);
    if (!m->updates)
        return cerr(r, "out of memory for %" PRIu64 " updates", n);
    m->nupdates = (int)n;
    for (int i = 0; i < (int)n; i++)
        if (read_update(r, i, &m->updates[i]))
            return -1;
    return 0;
}

/* A FETCH_REPLY's data: a bin of at most GOSSIP_FETCH_CHUNK bytes, copied
 * into a block of its own once the bytes are known to be there. */
static int read_data(cur *r, gossip_msg *m)
{
    if (need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b < 0xc4 || b > 0xc6)
        return wrong_kind(r, "a bin", b);
    r->p++;
    uint64_t n = 0;
    if (read_be(r, 1 << (b - 0xc4), &n))
        return -1;
    if (n > GOSSIP_FETCH_CHUNK)
        return cerr(r, "is a bin of %" PRIu64 " bytes, at most %u (GOSSIP_FETCH_CHUNK)", n,
                    GOSSIP_FETCH_CHUNK);
    if (need(r, (size_t)n))
        return -1;
    if (n) {
        m->data = malloc((size_t)n);
        if (!m->data)
            return cerr(r, "out of memory for %" PRIu64 " bytes", n);
        memcpy(m->data, r->p, (size_t)n);
    }
    m->data_len = (size_t)n;
    r->p += n;
    return 0;
}

static int read_msg_value(cur *r, int k, gossip_msg *m)
{
    uint64_t u = 0;
    switch (k) {
    case M_V:
        if (read_uint(r, 0, UINT64_MAX, &u))
            return -1;
        if (u != MESH_PROTOCOL_VERSION)
            return cerr(r, "protocol version %" PRIu64 ", this node speaks %d", u,
                        MESH_PROTOCOL_VERSION);
        m->version = (uint32_t)u;
        return 0;
    case M_T:
        if (read_uint(r, 0, UINT64_MAX, &u))
            return -1;
        if (!known_type(u))
            return cerr(r, "is %" PRIu64 ", not a gossip message type (1 to %d)", u,
                        MSG_TYPE_MAX);
        m->type = (gossip_msg_type)u;
        return 0;
    case M_MESH: return read_bin(r, m->mesh_id, GOSSIP_MESH_ID_LEN, GOSSIP_MESH_ID_LEN, NULL);
    case M_FROM: return read_str(r, m->from, sizeof m->from) || judge_name(r, m->from) ? -1 : 0;
    case M_SEQ:
        if (read_uint(r, 0, UINT32_MAX, &u))
            return -1;
        m->seq = (uint32_t)u;
        return 0;
    case M_OBS:
        return read_str(r, m->observed, sizeof m->observed) ||
                       judge_endpoint(r, m->observed, 1)
                   ? -1
                   : 0;
    case M_TARGET:
        return read_str(r, m->target, sizeof m->target) || judge_address(r, m->target) ? -1 : 0;
    case M_TPORT:
        if (read_uint(r, 1, 65535, &u))
            return -1;
        m->target_port = (uint16_t)u;
        return 0;
    case M_FL:
        if (read_uint(r, 0, UINT32_MAX, &u))
            return -1;
        if (u & ~(uint64_t)GOSSIP_SYNC_REPLY)
            return cerr(r, "has unknown bits 0x%" PRIx64 " (bit 0, GOSSIP_SYNC_REPLY, is the only one)",
                        u & ~(uint64_t)GOSSIP_SYNC_REPLY);
        m->flags = (uint32_t)u;
        return 0;
    case M_SECRET: return read_bin(r, m->secret, GOSSIP_SECRET_LEN, GOSSIP_SECRET_LEN, NULL);
    case M_OK: return read_bool(r, 0, &m->ok);
    case M_REASON: return read_str(r, m->reason, sizeof m->reason);
    case M_UP: return read_updates(r, m);
    case M_PATH:
        return read_str(r, m->path, sizeof m->path) || judge_path(r, m->path) ? -1 : 0;
    case M_OFF: return read_uint(r, 0, UINT64_MAX, &m->offset);
    case M_TOTAL: return read_uint(r, 0, UINT64_MAX, &m->total);
    case M_DATA: return read_data(r, m);
    }
    return -1;
}

static int decode_msg(const uint8_t *p, size_t len, gossip_msg *m, char *err, size_t errlen)
{
    cur r;
    cur_init(&r, p, len, "gossip message", err, errlen);
    if (len == 0)
        return cerr(&r, "empty message");
    int has_v = 0, has_t = 0;
    uint64_t v = 0, t = 0;
    peek(p, len, &has_v, &v, &has_t, &t);
    if (has_v && v != MESH_PROTOCOL_VERSION)
        return mesh_errf(err, errlen, "gossip: protocol version %" PRIu64 ", this node speaks %d",
                         v, MESH_PROTOCOL_VERSION);
    if (has_t && known_type(t))
        snprintf(r.ctx, sizeof r.ctx, "gossip %s", msg_types[t].name);

    uint64_t n = 0;
    if (read_map_len(&r, &n))
        return -1;
    if (n > M_COUNT)
        return cerr(&r, "map has %" PRIu64 " keys, a gossip message has at most %d", n, M_COUNT);
    uint32_t seen = 0;
    for (uint64_t i = 0; i < n; i++) {
        int k = 0;
        if (read_key(&r, msg_keys, M_COUNT, NULL, &k))
            return -1;
        if (seen & KEY(k)) {
            r.key = NULL;
            return cerr(&r, "duplicate key \"%s\"", msg_keys[k]);
        }
        seen |= KEY(k);
        if (read_msg_value(&r, k, m))
            return -1;
    }
    r.key = NULL;
    if (r.p != r.end)
        return cerr(&r, "%zu trailing byte%s after the map", left(&r), left(&r) == 1 ? "" : "s");
    if (!(seen & KEY(M_V)))
        return cerr(&r, "missing key \"v\"");
    if (!(seen & KEY(M_T)))
        return cerr(&r, "missing key \"t\"");

    uint32_t required = type_keys(m->type, m->ok);
    uint32_t allowed = required | (msg_types[m->type].updates ? KEY(M_UP) : 0);
    const char *tname = msg_types[m->type].name;
    const char *when = m->type != GOSSIP_MSG_FETCH_REPLY || !(seen & KEY(M_OK)) ? ""
                       : m->ok                         ? " when \"ok\" is true"
                                                       : " when \"ok\" is false";
    for (int k = 0; k < M_COUNT; k++) {
        if ((seen & KEY(k)) && !(allowed & KEY(k)))
            return cerr(&r, "key \"%s\" is not allowed in %s%s", msg_keys[k], tname, when);
        if (!(seen & KEY(k)) && (required & KEY(k)))
            return cerr(&r, "missing key \"%s\"%s", msg_keys[k], when);
    }
    if (m->type == GOSSIP_MSG_FETCH_REPLY && m->ok) {
        r.key = msg_keys[M_DATA];
        if (judge_part(&r, m->offset, m->data_len, m->total))
            return -1;
    }
    if (m->type == GOSSIP_MSG_JOIN) {
        r.key = msg_keys[M_UP];
        if (m->nupdates != 1)
            return cerr(&r, "a JOIN carries exactly one update (the joiner's ALIVE record), got %d",
                        m->nupdates);
        if (m->updates[0].state != GOSSIP_ALIVE) {
            r.key = "up[0].s";
            return cerr(&r, "a JOIN's update must be ALIVE, got %s",
                        state_names[m->updates[0].state]);
        }
    }
    return 0;
}

int gossip_decode(const void *buf, size_t len, gossip_msg *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!buf)
        len = 0;
    if (decode_msg(buf, len, out, err, errlen)) {
        free(out->updates);
        free(out->data);
        memset(out, 0, sizeof *out);
        return -1;
    }
    return 0;
}

void gossip_msg_free(gossip_msg *m)
{
    if (!m)
        return;
    free(m->updates);
    m->updates = NULL;
    m->nupdates = 0;
    free(m->data);
    m->data = NULL;
    m->data_len = 0;
}

/* ------------------------------------------------- admission and MACs */

/* The statement an admission signs: a label, the mesh, the member's two keys,
 * its name and the time. */
static size_t adm_statement(const gossip_record *r, int64_t at_ms, uint8_t *out)
{
    static const char label[] = "shardnode admission v1";
    size_t n = 0, nl = strnlen(r->name, MESH_NAME_MAX - 1);
    memcpy(out + n, label, sizeof label - 1), n += sizeof label - 1;
    memcpy(out + n, r->mesh_id, GOSSIP_MESH_ID_LEN), n += GOSSIP_MESH_ID_LEN;
    memcpy(out + n, r->id_pub, GOSSIP_KEY_LEN), n += GOSSIP_KEY_LEN;
    memcpy(out + n, r->wg_pub, GOSSIP_KEY_LEN), n += GOSSIP_KEY_LEN;
    out[n++] = (uint8_t)nl;
    memcpy(out + n, r->name, nl), n += nl;
    for (int i = 0; i < 8; i++)
        out[n++] = (uint8_t)((uint64_t)at_ms >> (56 - 8 * i));
    return n;
}

#define ADM_STATEMENT_MAX (32 + GOSSIP_MESH_ID_LEN + 2 * GOSSIP_KEY_LEN + 1 + MESH_NAME_MAX + 8)

int gossip_admission_sign(const gossip_record *r, const uint8_t admitter_priv[GOSSIP_KEY_LEN],
                          int64_t at_ms, gossip_admission *out, char *err, size_t errlen)
{
    uint8_t st[ADM_STATEMENT_MAX];
    char kerr[192] = "";
    memset(out, 0, sizeof *out);
    size_t n = adm_statement(r, at_ms, st);
    if (keys_ed25519_public(admitter_priv, out->by, kerr, sizeof kerr) != 0 ||
        keys_sign(admitter_priv, st, n, out->sig, kerr, sizeof kerr) != 0) {
        memset(out, 0, sizeof *out);
        return mesh_errf(err, errlen, "admission of %s: %s", r->name, kerr);
    }
    out->at_ms = at_ms;
    return 0;
}

int gossip_admission_verify(const gossip_record *r, const gossip_admission *a)
{
    uint8_t st[ADM_STATEMENT_MAX];
    size_t n = adm_statement(r, a->at_ms, st);
    return keys_verify(a->by, st, n, a->sig);
}

int gossip_admission_founder(const gossip_record *r, const gossip_admission *a)
{
    uint8_t id[KEYS_MESH_ID_LEN];
    if (memcmp(a->by, r->id_pub, GOSSIP_KEY_LEN) != 0 ||
        keys_mesh_id(r->id_pub, id, NULL, 0) != 0)
        return 0;
    return memcmp(id, r->mesh_id, GOSSIP_MESH_ID_LEN) == 0 && gossip_admission_verify(r, a);
}

int gossip_mac_key(const uint8_t own_priv[GOSSIP_KEY_LEN], const uint8_t peer_pub[GOSSIP_KEY_LEN],
                   uint8_t key[32], char *err, size_t errlen)
{
    static const char label[] = "shardnode gossip mac v1";
    uint8_t own_pub[KEYS_LEN], shared[KEYS_LEN], msg[sizeof label - 1 + 2 * KEYS_LEN];
    char kerr[192] = "";
    memset(key, 0, 32);
    if (keys_x25519_public(own_priv, own_pub, kerr, sizeof kerr) != 0 ||
        keys_x25519_shared(own_priv, peer_pub, shared, kerr, sizeof kerr) != 0)
        return mesh_errf(err, errlen, "gossip MAC key: %s", kerr);
    int own_first = memcmp(own_pub, peer_pub, KEYS_LEN) < 0;
    memcpy(msg, label, sizeof label - 1);
    memcpy(msg + sizeof label - 1, own_first ? own_pub : peer_pub, KEYS_LEN);
    memcpy(msg + sizeof label - 1 + KEYS_LEN, own_first ? peer_pub : own_pub, KEYS_LEN);
    int rc = keys_hmac_sha256(shared, sizeof shared, msg, sizeof msg, key);
    memset(shared, 0, sizeof shared);
    if (rc != 0)
        return mesh_errf(err, errlen, "gossip MAC key: HMAC-SHA256 failed");
    return 0;
}

void gossip_mac(const uint8_t key[32], const void *buf, size_t len, uint8_t mac[GOSSIP_MAC_LEN])
{
    uint8_t full[32];
    keys_hmac_sha256(key, 32, buf, len, full);
    memcpy(mac, full, GOSSIP_MAC_LEN);
}

int gossip_mac_check(const uint8_t key[32], const void *buf, size_t len)
{
    if (len < GOSSIP_MAC_LEN)
        return 0;
    uint8_t mac[GOSSIP_MAC_LEN];
    const uint8_t *p = buf;
    gossip_mac(key, p, len - GOSSIP_MAC_LEN, mac);
    uint8_t diff = 0;
    for (int i = 0; i < GOSSIP_MAC_LEN; i++)
        diff |= (uint8_t)(mac[i] ^ p[len - GOSSIP_MAC_LEN + i]);
    return diff == 0;
}

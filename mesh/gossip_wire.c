/* gossip_wire.c — the gossip codec (see mesh.h, "gossip codec", and
 * docs/PROTOCOL.md, "Gossip"): the SWIM messages that carry signed member
 * records (the records themselves and their admissions are gossip_record.c,
 * the msgpack layer both use gossip_msgpack.c), and the MACs every
 * datagram and frame ends with.
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
#include "gossip_wire_internal.h"

#include "keys.h"
#include "mesh_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ keys */

/* Message keys, in the order the encoder writes them ("v" first, as in
 * every version). */
enum {
    M_V, M_T, M_MESH, M_FROM, M_SEQ, M_OBS, M_TARGET, M_TPORT, M_FL, M_SECRET, M_OK,
    M_REASON, M_UP, M_PATH, M_OFF, M_TOTAL, M_DATA, M_PA, M_PB, M_PN, M_PM, M_RV, M_RP,
    M_COUNT
};
static const char *const msg_keys[M_COUNT] = {
    "v", "t", "mesh", "from", "seq", "obs", "target", "tport", "fl", "secret", "ok",
    "reason", "up", "path", "off", "total", "data", "pa", "pb", "pn", "pm", "rv", "rp",
};

/* Update keys, in the encoder's order. */
enum { U_S, U_R, U_G, U_A, U_W, U_INC, U_BY, U_COUNT };
static const char *const upd_keys[U_COUNT] = {"s", "r", "g", "a", "w", "inc", "by"};

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
    [GOSSIP_MSG_PUNCH] = {"PUNCH", COMMON | KEY(M_PA) | KEY(M_PB) | KEY(M_PN) | KEY(M_PM), 0},
    [GOSSIP_MSG_RELAY] = {"RELAY", COMMON | KEY(M_PA) | KEY(M_PB) | KEY(M_PN) | KEY(M_PM) |
                                       KEY(M_RV) | KEY(M_RP), 0},
};
#define MSG_TYPE_MAX GOSSIP_MSG_RELAY

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

/* ------------------------------------------------------ encoder checks */

static int check_update(gossip_cur *c, int i, const gossip_update *u)
{
    snprintf(c->base, sizeof c->base, "up[%d]", i);
    gossip_key_in_update(c, upd_keys[U_S]);
    if ((unsigned)u->state > GOSSIP_LEFT)
        return gossip_cerr(c, "is %d, not a state (0 ALIVE, 1 SUSPECT, 2 DEAD, 3 LEFT)",
                           (int)u->state);
    if (u->state == GOSSIP_ALIVE || u->state == GOSSIP_LEFT) {
        gossip_key_in_update(c, upd_keys[U_R]);
        if (u->rec.len < 1 || u->rec.len > GOSSIP_RECORD_MAX)
            return gossip_cerr(c, "record of %zu bytes, expected 1 to %d", u->rec.len,
                               GOSSIP_RECORD_MAX);
    } else {
        gossip_key_in_update(c, upd_keys[U_BY]);
        if (gossip_check_str(c, u->from, MESH_NAME_MAX) || gossip_judge_name(c, u->from))
            return -1;
    }
    return 0;
}

static int check_msg(gossip_cur *c, const gossip_msg *m)
{
    uint32_t keys = type_keys(m->type, m->ok);
    c->key = msg_keys[M_FROM];
    if (gossip_check_str(c, m->from, MESH_NAME_MAX) || gossip_judge_name(c, m->from))
        return -1;
    if (keys & KEY(M_OBS)) {
        c->key = msg_keys[M_OBS];
        if (gossip_check_str(c, m->observed, MESH_WG_ENDPOINT_MAX) ||
            gossip_judge_endpoint(c, m->observed, 1))
            return -1;
    }
    if (keys & KEY(M_TARGET)) {
        c->key = msg_keys[M_TARGET];
        if (gossip_check_str(c, m->target, GOSSIP_ADDR_MAX) || gossip_judge_address(c, m->target))
            return -1;
        c->key = msg_keys[M_TPORT];
        if (m->target_port == 0)
            return gossip_cerr(c, "is 0, expected 1 to 65535");
    }
    if (keys & KEY(M_FL)) {
        c->key = msg_keys[M_FL];
        if (m->flags & ~GOSSIP_SYNC_REPLY)
            return gossip_cerr(c, "has unknown bits 0x%" PRIx32
                                  " (bit 0, GOSSIP_SYNC_REPLY, is the only one)",
                               m->flags & ~GOSSIP_SYNC_REPLY);
    }
    if (keys & KEY(M_OK)) {
        c->key = msg_keys[M_OK];
        if (m->ok > 1)
            return gossip_cerr(c, "is %u, expected 0 or 1", (unsigned)m->ok);
    }
    if (keys & KEY(M_REASON)) {
        c->key = msg_keys[M_REASON];
        if (gossip_check_str(c, m->reason, MESH_TEXT_MAX))
            return -1;
    }
    if (keys & KEY(M_PATH)) {
        c->key = msg_keys[M_PATH];
        if (gossip_check_str(c, m->path, GOSSIP_PATH_MAX) || gossip_judge_path(c, m->path))
            return -1;
    }
    if (m->type == GOSSIP_MSG_FETCH_REPLY && m->ok) {
        c->key = msg_keys[M_REASON];
        if (!memchr(m->reason, 0, MESH_TEXT_MAX) || m->reason[0])
            return gossip_cerr(c, "a FETCH_REPLY that is ok carries no reason");
        c->key = msg_keys[M_DATA];
        if (m->data_len > GOSSIP_FETCH_CHUNK)
            return gossip_cerr(c, "%zu bytes, at most %u (GOSSIP_FETCH_CHUNK)", m->data_len,
                               GOSSIP_FETCH_CHUNK);
        if (m->data_len && !m->data)
            return gossip_cerr(c, "is NULL with %zu bytes", m->data_len);
        if (gossip_judge_part(c, m->offset, m->data_len, m->total))
            return -1;
    } else if (m->type == GOSSIP_MSG_FETCH_REPLY) {
        c->key = msg_keys[M_DATA];
        if (m->data_len || m->offset || m->total)
            return gossip_cerr(c, "a FETCH_REPLY that refuses carries no data, offset or total");
    }
    c->key = msg_keys[M_UP];
    if (m->nupdates < 0 || m->nupdates > GOSSIP_MAX_UPDATES)
        return gossip_cerr(c, "%d updates, expected 0 to %d", m->nupdates, GOSSIP_MAX_UPDATES);
    if (m->nupdates && !msg_types[m->type].updates)
        return gossip_cerr(c, "a %s carries no updates, got %d", msg_types[m->type].name,
                           m->nupdates);
    if (m->nupdates && !m->updates)
        return gossip_cerr(c, "is NULL with %d updates", m->nupdates);
    if (m->type == GOSSIP_MSG_JOIN && m->nupdates != 1)
        return gossip_cerr(c, "a JOIN carries exactly one update (the joiner's ALIVE record), "
                              "got %d", m->nupdates);
    for (int i = 0; i < m->nupdates; i++)
        if (check_update(c, i, &m->updates[i]))
            return -1;
    if (m->type == GOSSIP_MSG_JOIN && m->updates[0].state != GOSSIP_ALIVE) {
        c->key = "up[0].s";
        return gossip_cerr(c, "a JOIN's update must be ALIVE, got %s",
                           state_names[m->updates[0].state]);
    }
    c->key = NULL;
    return 0;
}

/* ---------------------------------------------------------------- packer */

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
        rc |= gossip_pack_str(pk, upd_keys[k]);
        switch (k) {
        case U_S: rc |= msgpack_pack_uint32(pk, (uint32_t)u->state); break;
        case U_R: rc |= gossip_pack_bin(pk, u->rec.bytes, u->rec.len); break;
        case U_G: rc |= gossip_pack_bin(pk, u->rec.sig, GOSSIP_SIG_LEN); break;
        case U_A: rc |= gossip_pack_bin(pk, adm, GOSSIP_ADM_LEN); break;
        case U_W: rc |= gossip_pack_bin(pk, u->wg_pub, GOSSIP_KEY_LEN); break;
        case U_INC: rc |= msgpack_pack_uint64(pk, u->incarnation); break;
        case U_BY: rc |= gossip_pack_str(pk, u->from); break;
        }
    }
    return rc;
}

int gossip_encode(const gossip_msg *m, uint8_t *buf, size_t cap, size_t *len, char *err,
                  size_t errlen)
{
    gossip_cur c;
    gossip_cur_init(&c, NULL, 0, "gossip message", err, errlen);
    *len = 0;
    if (!known_type((uint64_t)m->type)) {
        c.key = msg_keys[M_T];
        return gossip_cerr(&c, "is %d, not a gossip message type (1 to %d)", (int)m->type,
                           MSG_TYPE_MAX);
    }
    snprintf(c.ctx, sizeof c.ctx, "gossip %s", msg_types[m->type].name);
    if (check_msg(&c, m))
        return -1;

    uint32_t keys = type_keys(m->type, m->ok);
    if (m->nupdates)
        keys |= KEY(M_UP);
    gossip_fixbuf fb = {buf, cap, 0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &fb, gossip_fixbuf_write);
    int rc = msgpack_pack_map(&pk, (size_t)__builtin_popcount(keys));
    for (int k = 0; k < M_COUNT; k++) {
        if (!(keys & KEY(k)))
            continue;
        rc |= gossip_pack_str(&pk, msg_keys[k]);
        switch (k) {
        case M_V: rc |= msgpack_pack_uint32(&pk, GOSSIP_PROTOCOL_VERSION); break;
        case M_T: rc |= msgpack_pack_uint32(&pk, (uint32_t)m->type); break;
        case M_MESH: rc |= gossip_pack_bin(&pk, m->mesh_id, GOSSIP_MESH_ID_LEN); break;
        case M_FROM: rc |= gossip_pack_str(&pk, m->from); break;
        case M_SEQ: rc |= msgpack_pack_uint32(&pk, m->seq); break;
        case M_OBS: rc |= gossip_pack_str(&pk, m->observed); break;
        case M_TARGET: rc |= gossip_pack_str(&pk, m->target); break;
        case M_TPORT: rc |= msgpack_pack_uint16(&pk, m->target_port); break;
        case M_FL: rc |= msgpack_pack_uint32(&pk, m->flags); break;
        case M_SECRET: rc |= gossip_pack_bin(&pk, m->secret, GOSSIP_SECRET_LEN); break;
        case M_OK: rc |= m->ok ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk); break;
        case M_REASON: rc |= gossip_pack_str(&pk, m->reason); break;
        case M_UP:
            rc |= msgpack_pack_array(&pk, (size_t)m->nupdates);
            for (int i = 0; i < m->nupdates; i++)
                rc |= pack_update(&pk, &m->updates[i]);
            break;
        case M_PATH: rc |= gossip_pack_str(&pk, m->path); break;
        case M_OFF: rc |= msgpack_pack_uint64(&pk, m->offset); break;
        case M_TOTAL: rc |= msgpack_pack_uint64(&pk, m->total); break;
        case M_DATA: rc |= gossip_pack_bin(&pk, m->data, m->data_len); break;
        case M_PA: rc |= gossip_pack_bin(&pk, m->punch_from, GOSSIP_KEY_LEN); break;
        case M_PB: rc |= gossip_pack_bin(&pk, m->punch_to, GOSSIP_KEY_LEN); break;
        case M_PN: rc |= msgpack_pack_uint64(&pk, m->punch_n); break;
        case M_PM: rc |= gossip_pack_bin(&pk, m->punch_mac, GOSSIP_PUNCH_MAC_LEN); break;
        case M_RV: rc |= gossip_pack_bin(&pk, m->relay_via, GOSSIP_KEY_LEN); break;
        case M_RP: rc |= msgpack_pack_uint32(&pk, m->relay_ports); break;
        }
    }
    if (rc)
        return gossip_cerr(&c, "msgpack-c failed to pack the message");
    if (fb.len > cap)
        return gossip_cerr(&c, "the message (%zu bytes) does not fit in %zu bytes", fb.len, cap);
    *len = fb.len;
    return 0;
}

/* --------------------------------------------------------------- message */

/* Looks for "v" and "t" at the top level before anything is judged: a node
 * of another protocol version is told so, not about a key or type it cannot
 * know, and the messages of the strict pass can name the type. Silent: the
 * strict pass says what is wrong with whatever this cannot read. */
static void peek(const uint8_t *p, size_t len, int *has_v, uint64_t *v, int *has_t,
                 uint64_t *t)
{
    gossip_cur r;
    gossip_cur_init(&r, p, len, "", NULL, 0);
    *has_v = *has_t = 0;
    uint64_t n = 0;
    if (len < 1 || gossip_read_map_len(&r, &n))
        return;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t klen = 0;
        if (gossip_read_str_len(&r, &klen) || gossip_left(&r) < klen)
            return;
        int which = klen == 1 && r.p[0] == 'v' ? 1 : klen == 1 && r.p[0] == 't' ? 2 : 0;
        r.p += klen;
        if (which) {
            gossip_wire_int w = {0, 0, 0};
            if (gossip_read_int(&r, "", &w) || w.neg)
                return;
            if (which == 1 && !*has_v)
                *has_v = 1, *v = w.u;
            if (which == 2 && !*has_t)
                *has_t = 1, *t = w.u;
        } else if (gossip_skip_any(&r, 0)) {
            return;
        }
    }
}

static int read_update(gossip_cur *r, int i, gossip_update *u)
{
    snprintf(r->base, sizeof r->base, "up[%d]", i);
    r->key = r->base;
    uint64_t n = 0, v = 0;
    if (gossip_read_map_len(r, &n))
        return -1;
    if (n > U_COUNT)
        return gossip_cerr(r, "map has %" PRIu64 " keys, an update has at most 5", n);
    uint32_t seen = 0;
    for (uint64_t j = 0; j < n; j++) {
        int k = 0;
        if (gossip_read_key(r, upd_keys, U_COUNT, r->base, &k))
            return -1;
        if (seen & KEY(k)) {
            r->key = r->base;
            return gossip_cerr(r, "duplicate key \"%s\"", upd_keys[k]);
        }
        seen |= KEY(k);
        int rc = 0;
        switch (k) {
        case U_S:
            rc = gossip_read_uint(r, 0, GOSSIP_LEFT, &v);
            u->state = (gossip_state)v;
            break;
        case U_R:
            rc = gossip_read_bin(r, u->rec.bytes, 1, GOSSIP_RECORD_MAX, &u->rec.len);
            break;
        case U_G: rc = gossip_read_bin(r, u->rec.sig, GOSSIP_SIG_LEN, GOSSIP_SIG_LEN, NULL); break;
        case U_A: {
            uint8_t adm[GOSSIP_ADM_LEN];
            rc = gossip_read_bin(r, adm, GOSSIP_ADM_LEN, GOSSIP_ADM_LEN, NULL);
            if (rc == 0)
                adm_from_wire(adm, &u->rec.adm);
            break;
        }
        case U_W: rc = gossip_read_bin(r, u->wg_pub, GOSSIP_KEY_LEN, GOSSIP_KEY_LEN, NULL); break;
        case U_INC: rc = gossip_read_uint(r, 0, UINT64_MAX, &u->incarnation); break;
        case U_BY:
            rc = gossip_read_str(r, u->from, sizeof u->from) || gossip_judge_name(r, u->from)
                     ? -1
                     : 0;
            break;
        }
        if (rc)
            return -1;
    }
    r->key = r->base;
    if (!(seen & KEY(U_S)))
        return gossip_cerr(r, "missing key \"s\"");
    uint32_t required = update_keys(u->state);
    uint32_t allowed = required | ((required & KEY(U_R)) ? KEY(U_A) : 0);
    for (int k = 0; k < U_COUNT; k++) {
        if ((seen & KEY(k)) && !(allowed & KEY(k)))
            return gossip_cerr(r, "key \"%s\" is not allowed when \"s\" is %s", upd_keys[k],
                               state_names[u->state]);
        if (!(seen & KEY(k)) && (required & KEY(k)))
            return gossip_cerr(r, "missing key \"%s\" (\"s\" is %s)", upd_keys[k],
                               state_names[u->state]);
    }
    return 0;
}

static int read_updates(gossip_cur *r, gossip_msg *m)
{
    uint64_t n = 0;
    if (gossip_read_array_len(r, &n))
        return -1;
    if (n > GOSSIP_MAX_UPDATES)
        return gossip_cerr(r, "%" PRIu64 " updates, at most %d", n, GOSSIP_MAX_UPDATES);
    if (n > gossip_left(r) / UPDATE_MIN_BYTES)
        return gossip_cerr(r, "the bytes end inside it (%" PRIu64 " updates in %zu bytes)", n,
                           gossip_left(r));
    if (n == 0)
        return 0;
    m->updates = calloc((size_t)n, sizeof *m->updates);
    if (!m->updates)
        return gossip_cerr(r, "out of memory for %" PRIu64 " updates", n);
    m->nupdates = (int)n;
    for (int i = 0; i < (int)n; i++)
        if (read_update(r, i, &m->updates[i]))
            return -1;
    return 0;
}

/* A FETCH_REPLY's data: a bin of at most GOSSIP_FETCH_CHUNK bytes, copied
 * into a block of its own once the bytes are known to be there. */
static int read_data(gossip_cur *r, gossip_msg *m)
{
    if (gossip_need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b < 0xc4 || b > 0xc6)
        return gossip_wrong_kind(r, "a bin", b);
    r->p++;
    uint64_t n = 0;
    if (gossip_read_be(r, 1 << (b - 0xc4), &n))
        return -1;
    if (n > GOSSIP_FETCH_CHUNK)
        return gossip_cerr(r, "is a bin of %" PRIu64 " bytes, at most %u (GOSSIP_FETCH_CHUNK)", n,
                           GOSSIP_FETCH_CHUNK);
    if (gossip_need(r, (size_t)n))
        return -1;
    if (n) {
        m->data = malloc((size_t)n);
        if (!m->data)
            return gossip_cerr(r, "out of memory for %" PRIu64 " bytes", n);
        memcpy(m->data, r->p, (size_t)n);
    }
    m->data_len = (size_t)n;
    r->p += n;
    return 0;
}

static int read_msg_value(gossip_cur *r, int k, gossip_msg *m)
{
    uint64_t u = 0;
    switch (k) {
    case M_V:
        if (gossip_read_uint(r, 0, UINT64_MAX, &u))
            return -1;
        if (u != GOSSIP_PROTOCOL_VERSION)
            return gossip_cerr(r, "protocol version %" PRIu64 ", this node speaks %d", u,
                               GOSSIP_PROTOCOL_VERSION);
        m->version = (uint32_t)u;
        return 0;
    case M_T:
        if (gossip_read_uint(r, 0, UINT64_MAX, &u))
            return -1;
        if (!known_type(u))
            return gossip_cerr(r, "is %" PRIu64 ", not a gossip message type (1 to %d)", u,
                               MSG_TYPE_MAX);
        m->type = (gossip_msg_type)u;
        return 0;
    case M_MESH:
        return gossip_read_bin(r, m->mesh_id, GOSSIP_MESH_ID_LEN, GOSSIP_MESH_ID_LEN, NULL);
    case M_FROM:
        return gossip_read_str(r, m->from, sizeof m->from) || gossip_judge_name(r, m->from)
                   ? -1
                   : 0;
    case M_SEQ:
        if (gossip_read_uint(r, 0, UINT32_MAX, &u))
            return -1;
        m->seq = (uint32_t)u;
        return 0;
    case M_OBS:
        return gossip_read_str(r, m->observed, sizeof m->observed) ||
                       gossip_judge_endpoint(r, m->observed, 1)
                   ? -1
                   : 0;
    case M_TARGET:
        return gossip_read_str(r, m->target, sizeof m->target) ||
                       gossip_judge_address(r, m->target)
                   ? -1
                   : 0;
    case M_TPORT:
        if (gossip_read_uint(r, 1, 65535, &u))
            return -1;
        m->target_port = (uint16_t)u;
        return 0;
    case M_FL:
        if (gossip_read_uint(r, 0, UINT32_MAX, &u))
            return -1;
        if (u & ~(uint64_t)GOSSIP_SYNC_REPLY)
            return gossip_cerr(r, "has unknown bits 0x%" PRIx64
                                  " (bit 0, GOSSIP_SYNC_REPLY, is the only one)",
                               u & ~(uint64_t)GOSSIP_SYNC_REPLY);
        m->flags = (uint32_t)u;
        return 0;
    case M_SECRET: return gossip_read_bin(r, m->secret, GOSSIP_SECRET_LEN, GOSSIP_SECRET_LEN, NULL);
    case M_OK: return gossip_read_bool(r, 0, &m->ok);
    case M_REASON: return gossip_read_str(r, m->reason, sizeof m->reason);
    case M_UP: return read_updates(r, m);
    case M_PATH:
        return gossip_read_str(r, m->path, sizeof m->path) || gossip_judge_path(r, m->path)
                   ? -1
                   : 0;
    case M_OFF: return gossip_read_uint(r, 0, UINT64_MAX, &m->offset);
    case M_TOTAL: return gossip_read_uint(r, 0, UINT64_MAX, &m->total);
    case M_DATA: return read_data(r, m);
    case M_PA: return gossip_read_bin(r, m->punch_from, GOSSIP_KEY_LEN, GOSSIP_KEY_LEN, NULL);
    case M_PB: return gossip_read_bin(r, m->punch_to, GOSSIP_KEY_LEN, GOSSIP_KEY_LEN, NULL);
    case M_PN: return gossip_read_uint(r, 0, UINT64_MAX, &m->punch_n);
    case M_PM:
        return gossip_read_bin(r, m->punch_mac, GOSSIP_PUNCH_MAC_LEN, GOSSIP_PUNCH_MAC_LEN, NULL);
    case M_RV: return gossip_read_bin(r, m->relay_via, GOSSIP_KEY_LEN, GOSSIP_KEY_LEN, NULL);
    case M_RP:
        if (gossip_read_uint(r, 0, UINT32_MAX, &u))
            return -1;
        m->relay_ports = (uint32_t)u;
        return 0;
    }
    return -1;
}

static int decode_msg(const uint8_t *p, size_t len, gossip_msg *m, char *err, size_t errlen)
{
    gossip_cur r;
    gossip_cur_init(&r, p, len, "gossip message", err, errlen);
    if (len == 0)
        return gossip_cerr(&r, "empty message");
    int has_v = 0, has_t = 0;
    uint64_t v = 0, t = 0;
    peek(p, len, &has_v, &v, &has_t, &t);
    if (has_v && v != GOSSIP_PROTOCOL_VERSION)
        return mesh_errf(err, errlen, "gossip: protocol version %" PRIu64 ", this node speaks %d",
                         v, GOSSIP_PROTOCOL_VERSION);
    if (has_t && known_type(t))
        snprintf(r.ctx, sizeof r.ctx, "gossip %s", msg_types[t].name);

    uint64_t n = 0;
    if (gossip_read_map_len(&r, &n))
        return -1;
    if (n > M_COUNT)
        return gossip_cerr(&r, "map has %" PRIu64 " keys, a gossip message has at most %d", n,
                           M_COUNT);
    uint32_t seen = 0;
    for (uint64_t i = 0; i < n; i++) {
        int k = 0;
        if (gossip_read_key(&r, msg_keys, M_COUNT, NULL, &k))
            return -1;
        if (seen & KEY(k)) {
            r.key = NULL;
            return gossip_cerr(&r, "duplicate key \"%s\"", msg_keys[k]);
        }
        seen |= KEY(k);
        if (read_msg_value(&r, k, m))
            return -1;
    }
    r.key = NULL;
    if (r.p != r.end)
        return gossip_cerr(&r, "%zu trailing byte%s after the map", gossip_left(&r),
                           gossip_left(&r) == 1 ? "" : "s");
    if (!(seen & KEY(M_V)))
        return gossip_cerr(&r, "missing key \"v\"");
    if (!(seen & KEY(M_T)))
        return gossip_cerr(&r, "missing key \"t\"");

    uint32_t required = type_keys(m->type, m->ok);
    uint32_t allowed = required | (msg_types[m->type].updates ? KEY(M_UP) : 0);
    const char *tname = msg_types[m->type].name;
    const char *when = m->type != GOSSIP_MSG_FETCH_REPLY || !(seen & KEY(M_OK)) ? ""
                       : m->ok                         ? " when \"ok\" is true"
                                                       : " when \"ok\" is false";
    for (int k = 0; k < M_COUNT; k++) {
        if ((seen & KEY(k)) && !(allowed & KEY(k)))
            return gossip_cerr(&r, "key \"%s\" is not allowed in %s%s", msg_keys[k], tname, when);
        if (!(seen & KEY(k)) && (required & KEY(k)))
            return gossip_cerr(&r, "missing key \"%s\"%s", msg_keys[k], when);
    }
    if (m->type == GOSSIP_MSG_FETCH_REPLY && m->ok) {
        r.key = msg_keys[M_DATA];
        if (gossip_judge_part(&r, m->offset, m->data_len, m->total))
            return -1;
    }
    if (m->type == GOSSIP_MSG_JOIN) {
        r.key = msg_keys[M_UP];
        if (m->nupdates != 1)
            return gossip_cerr(&r, "a JOIN carries exactly one update (the joiner's ALIVE "
                                   "record), got %d", m->nupdates);
        if (m->updates[0].state != GOSSIP_ALIVE) {
            r.key = "up[0].s";
            return gossip_cerr(&r, "a JOIN's update must be ALIVE, got %s",
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

/* ----------------------------------------------------------------- MACs */

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

/* gossip_record.c — signed member records and their admissions (see
 * mesh.h, "gossip codec", and docs/PROTOCOL.md, "Gossip"): the record's
 * keys and checks, packing and signing it with the node's identity key
 * (gossip_record_sign), decoding and verifying one (gossip_record_open),
 * and the statement an admitting member signs over the mesh id, the two
 * keys and the name (gossip_admission_sign, _verify, _founder). The cursor,
 * field rules and strict reader are gossip_msgpack.c's; the messages that
 * carry records are gossip_wire.c's. */
#include "gossip_wire_internal.h"

#include "keys.h"
#include "mesh_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

_Static_assert(GOSSIP_KEY_LEN == KEYS_LEN, "gossip keys are keys/ keys");
_Static_assert(GOSSIP_SIG_LEN == KEYS_SIG_LEN, "gossip signatures are keys/ signatures");

/* Record keys, in the encoder's order; every one is required except "nat",
 * written only when true (missing: false), and "job", written only when the
 * text is not empty (missing: ""). */
enum {
    R_MESH, R_NAME, R_WG, R_ID, R_ADDR, R_PORT, R_INC, R_LEFT, R_EP, R_SW, R_PROTO, R_MEM,
    R_DEV, R_T, R_NAT, R_JOB, R_COUNT
};
static const char *const rec_keys[R_COUNT] = {
    "mesh", "name", "wg", "id", "addr", "port", "inc", "left", "ep", "sw", "proto", "mem",
    "dev", "t", "nat", "job",
};
#define REC_OPTIONAL (KEY(R_NAT) | KEY(R_JOB))

/* ------------------------------------------------------ encoder checks */

/* Checks a record the decoder would accept; sets c->ctx to "record of NAME"
 * once the name is known to be good. */
static int check_record(gossip_cur *c, const gossip_record *r)
{
    c->key = rec_keys[R_NAME];
    if (gossip_check_str(c, r->name, MESH_NAME_MAX) || gossip_judge_name(c, r->name))
        return -1;
    snprintf(c->ctx, sizeof c->ctx, "record of %s", r->name);
    c->key = rec_keys[R_ADDR];
    if (gossip_check_str(c, r->address, GOSSIP_ADDR_MAX) || gossip_judge_address(c, r->address))
        return -1;
    c->key = rec_keys[R_PORT];
    if (r->port == 0)
        return gossip_cerr(c, "is 0, expected 1 to 65535");
    c->key = rec_keys[R_LEFT];
    if (r->left > 1)
        return gossip_cerr(c, "is %u, expected 0 or 1", (unsigned)r->left);
    c->key = rec_keys[R_EP];
    if (r->nendpoints < 0 || r->nendpoints > GOSSIP_MAX_ENDPOINTS)
        return gossip_cerr(c, "%d endpoints, expected 0 to %d", r->nendpoints,
                           GOSSIP_MAX_ENDPOINTS);
    for (int i = 0; i < r->nendpoints; i++) {
        gossip_key_index(c, rec_keys[R_EP], i);
        if (gossip_check_str(c, r->endpoints[i], MESH_WG_ENDPOINT_MAX) ||
            gossip_judge_endpoint(c, r->endpoints[i], 0))
            return -1;
    }
    c->key = rec_keys[R_NAT];
    if (r->nat > 1)
        return gossip_cerr(c, "is %u, expected 0 or 1", (unsigned)r->nat);
    c->key = rec_keys[R_SW];
    if (gossip_check_str(c, r->software, GOSSIP_SOFTWARE_MAX))
        return -1;
    c->key = rec_keys[R_DEV];
    if (gossip_check_str(c, r->devices, GOSSIP_DEVICES_MAX))
        return -1;
    c->key = rec_keys[R_JOB];
    if (gossip_check_str(c, r->job, GOSSIP_JOB_MAX))
        return -1;
    c->key = NULL;
    return 0;
}

static int pack_record(msgpack_packer *pk, const gossip_record *r)
{
    int has_job = r->job[0] != 0, has_nat = r->nat != 0;
    int rc = msgpack_pack_map(pk, (size_t)(R_COUNT - 2 + has_job + has_nat));
    for (int k = 0; k < R_COUNT; k++) {
        if ((k == R_JOB && !has_job) || (k == R_NAT && !has_nat))
            continue;
        rc |= gossip_pack_str(pk, rec_keys[k]);
        switch (k) {
        case R_MESH: rc |= gossip_pack_bin(pk, r->mesh_id, GOSSIP_MESH_ID_LEN); break;
        case R_NAME: rc |= gossip_pack_str(pk, r->name); break;
        case R_WG: rc |= gossip_pack_bin(pk, r->wg_pub, GOSSIP_KEY_LEN); break;
        case R_ID: rc |= gossip_pack_bin(pk, r->id_pub, GOSSIP_KEY_LEN); break;
        case R_ADDR: rc |= gossip_pack_str(pk, r->address); break;
        case R_PORT: rc |= msgpack_pack_uint16(pk, r->port); break;
        case R_INC: rc |= msgpack_pack_uint64(pk, r->incarnation); break;
        case R_LEFT: rc |= r->left ? msgpack_pack_true(pk) : msgpack_pack_false(pk); break;
        case R_EP:
            rc |= msgpack_pack_array(pk, (size_t)r->nendpoints);
            for (int i = 0; i < r->nendpoints; i++)
                rc |= gossip_pack_str(pk, r->endpoints[i]);
            break;
        case R_SW: rc |= gossip_pack_str(pk, r->software); break;
        case R_PROTO: rc |= msgpack_pack_uint32(pk, r->protocol); break;
        case R_MEM: rc |= msgpack_pack_uint64(pk, r->mem_free); break;
        case R_DEV: rc |= gossip_pack_str(pk, r->devices); break;
        case R_T: rc |= msgpack_pack_int64(pk, r->signed_ms); break;
        case R_NAT: rc |= msgpack_pack_true(pk); break;
        case R_JOB: rc |= gossip_pack_str(pk, r->job); break;
        }
    }
    return rc;
}

int gossip_record_sign(const gossip_record *r, const uint8_t id_priv[GOSSIP_KEY_LEN],
                       gossip_signed *out, char *err, size_t errlen)
{
    gossip_cur c;
    gossip_cur_init(&c, NULL, 0, "gossip record", err, errlen);
    memset(out, 0, sizeof *out);
    if (check_record(&c, r))
        return -1;
    uint8_t pub[KEYS_LEN];
    char kerr[192] = "";
    if (keys_ed25519_public(id_priv, pub, kerr, sizeof kerr) != 0)
        return gossip_cerr(&c, "%s", kerr);
    if (memcmp(pub, r->id_pub, KEYS_LEN) != 0)
        return gossip_cerr(&c, "the signing key is not the private key of the record's \"id\" "
                               "(its identity key): refusing to sign");
    gossip_fixbuf fb = {out->bytes, sizeof out->bytes, 0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &fb, gossip_fixbuf_write);
    if (pack_record(&pk, r) != 0) {
        memset(out, 0, sizeof *out);
        return gossip_cerr(&c, "msgpack-c failed to pack the record");
    }
    if (fb.len > sizeof out->bytes) {
        memset(out, 0, sizeof *out);
        return gossip_cerr(&c, "the record (%zu bytes) does not fit in %d bytes", fb.len,
                           GOSSIP_RECORD_MAX);
    }
    if (keys_sign(id_priv, out->bytes, fb.len, out->sig, kerr, sizeof kerr) != 0) {
        memset(out, 0, sizeof *out);
        return gossip_cerr(&c, "%s", kerr);
    }
    out->len = fb.len;
    return 0;
}

/* ---------------------------------------------------------------- record */

static int read_record_value(gossip_cur *r, int k, gossip_record *rec)
{
    uint64_t u = 0;
    switch (k) {
    case R_MESH:
        return gossip_read_bin(r, rec->mesh_id, GOSSIP_MESH_ID_LEN, GOSSIP_MESH_ID_LEN, NULL);
    case R_NAME:
        if (gossip_read_str(r, rec->name, sizeof rec->name) || gossip_judge_name(r, rec->name))
            return -1;
        snprintf(r->ctx, sizeof r->ctx, "record of %s", rec->name);
        return 0;
    case R_WG: return gossip_read_bin(r, rec->wg_pub, GOSSIP_KEY_LEN, GOSSIP_KEY_LEN, NULL);
    case R_ID: return gossip_read_bin(r, rec->id_pub, GOSSIP_KEY_LEN, GOSSIP_KEY_LEN, NULL);
    case R_ADDR:
        return gossip_read_str(r, rec->address, sizeof rec->address) ||
                       gossip_judge_address(r, rec->address)
                   ? -1
                   : 0;
    case R_PORT:
        if (gossip_read_uint(r, 1, 65535, &u))
            return -1;
        rec->port = (uint16_t)u;
        return 0;
    case R_INC: return gossip_read_uint(r, 0, UINT64_MAX, &rec->incarnation);
    case R_LEFT: return gossip_read_bool(r, 1, &rec->left);
    case R_EP: {
        uint64_t n = 0;
        if (gossip_read_array_len(r, &n))
            return -1;
        if (n > GOSSIP_MAX_ENDPOINTS)
            return gossip_cerr(r, "%" PRIu64 " endpoints, at most %d", n, GOSSIP_MAX_ENDPOINTS);
        for (int i = 0; i < (int)n; i++) {
            gossip_key_index(r, rec_keys[R_EP], i);
            if (gossip_read_str(r, rec->endpoints[i], MESH_WG_ENDPOINT_MAX) ||
                gossip_judge_endpoint(r, rec->endpoints[i], 0))
                return -1;
        }
        rec->nendpoints = (int)n;
        return 0;
    }
    case R_SW: return gossip_read_str(r, rec->software, sizeof rec->software);
    case R_PROTO:
        if (gossip_read_uint(r, 0, UINT32_MAX, &u))
            return -1;
        rec->protocol = (uint32_t)u;
        return 0;
    case R_MEM: return gossip_read_uint(r, 0, UINT64_MAX, &rec->mem_free);
    case R_DEV: return gossip_read_str(r, rec->devices, sizeof rec->devices);
    case R_T: return gossip_read_i64(r, &rec->signed_ms);
    case R_NAT:
        /* Written only when true, so a record has one encoding. */
        if (gossip_read_bool(r, 1, &rec->nat))
            return -1;
        return rec->nat ? 0 : gossip_cerr(r, "is false: the key is written only when true");
    case R_JOB: return gossip_read_str(r, rec->job, sizeof rec->job);
    }
    return -1;
}

static int decode_record(const uint8_t *p, size_t len, gossip_record *rec, char *err,
                         size_t errlen)
{
    gossip_cur r;
    gossip_cur_init(&r, p, len, "gossip record", err, errlen);
    if (len < 1 || len > GOSSIP_RECORD_MAX)
        return gossip_cerr(&r, "%zu bytes, expected 1 to %d", len, GOSSIP_RECORD_MAX);
    uint64_t n = 0;
    if (gossip_read_map_len(&r, &n))
        return -1;
    if (n > R_COUNT)
        return gossip_cerr(&r, "map has %" PRIu64 " keys, a record has at most %d", n, R_COUNT);
    uint32_t seen = 0;
    for (uint64_t i = 0; i < n; i++) {
        int k = 0;
        if (gossip_read_key(&r, rec_keys, R_COUNT, NULL, &k))
            return -1;
        if (seen & KEY(k)) {
            r.key = NULL;
            return gossip_cerr(&r, "duplicate key \"%s\"", rec_keys[k]);
        }
        seen |= KEY(k);
        if (read_record_value(&r, k, rec))
            return -1;
    }
    r.key = NULL;
    if (r.p != r.end)
        return gossip_cerr(&r, "%zu trailing byte%s after the map", gossip_left(&r),
                           gossip_left(&r) == 1 ? "" : "s");
    for (int k = 0; k < R_COUNT; k++)
        if (!(seen & KEY(k)) && !(REC_OPTIONAL & KEY(k)))
            return gossip_cerr(&r, "missing key \"%s\"", rec_keys[k]);
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

/* ------------------------------------------------------------ admission */

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

/* gossip_wire_fixture.h — what the gossip codec tests share: sample
 * records, updates and messages of every type signed with fixed keys,
 * exact-size decoding and comparison, and field-by-field message building
 * with msgpack-c (the hand-made frames the refusal tests damage). Included
 * by test_gossip_wire.c and test_gossip_wire_refusals.c only; every
 * function is static, unused-function warnings silenced for this header.
 * Every decode reads from a heap block of exactly the input's size, so under
 * ASan a read one byte too far is a failure. */
#ifndef SHARDNODE_TEST_GOSSIP_WIRE_FIXTURE_H
#define SHARDNODE_TEST_GOSSIP_WIRE_FIXTURE_H

#include "keys.h"
#include "mesh.h"

#include <inttypes.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-variable"

static const char *type_names[] = {"?",    "PING",       "ACK",    "PING_REQ",
                                   "SYNC", "JOIN",       "JOIN_REPLY", "UPDATE",
                                   "FETCH", "FETCH_REPLY", "PUNCH"};
#define LAST_TYPE GOSSIP_MSG_RELAY

/* A FETCH_REPLY's sample data. */
static uint8_t chunk[300];

/* ------------------------------------------------------------- fixtures */

/* Two identities with fixed private keys, so every run signs the same. */
static uint8_t priv[2][KEYS_LEN], pub[2][KEYS_LEN];

static void init_keys(void)
{
    char err[256];
    for (int k = 0; k < 2; k++) {
        for (int j = 0; j < KEYS_LEN; j++)
            priv[k][j] = (uint8_t)(j * 7 + 1 + k * 100);
        if (keys_ed25519_public(priv[k], pub[k], err, sizeof err) != 0) {
            printf("FAIL: keys: %s\n", err);
            failures++;
        }
    }
}

static void sample_record(gossip_record *r, int i)
{
    memset(r, 0, sizeof *r);
    for (int j = 0; j < GOSSIP_MESH_ID_LEN; j++)
        r->mesh_id[j] = (uint8_t)(0xa0 + j);
    snprintf(r->name, sizeof r->name, "node-%d", i);
    memset(r->wg_pub, 0x10 + i, sizeof r->wg_pub);
    memcpy(r->id_pub, pub[i & 1], KEYS_LEN);
    strcpy(r->address, i % 2 ? "fd5a::1:2" : "10.77.3.4");
    r->port = GOSSIP_DEFAULT_PORT;
    r->incarnation = 5 + (uint64_t)i;
    r->nendpoints = 2;
    strcpy(r->endpoints[0], "203.0.113.7:51820");
    strcpy(r->endpoints[1], "[2001:db8::7]:51820");
    strcpy(r->software, "shardnode 0.1.0");
    r->protocol = MESH_PROTOCOL_VERSION;
    r->mem_free = 17179869184ull;
    strcpy(r->devices, "{\"cpus\":16,\"gpus\":[]}");
    r->signed_ms = 1760000000000 + i;
}

static void sign_or_fail(const gossip_record *r, int key, gossip_signed *out, int line)
{
    char err[256] = "";
    int rc = gossip_record_sign(r, priv[key], out, err, sizeof err);
    CHECK(rc == 0, "line %d: sign: %s", line, err);
}

/* updates[]: ALIVE node-0, SUSPECT, DEAD, LEFT node-1 (its record says left). */
static gossip_update ups[4];

static void init_updates(void)
{
    gossip_record r;
    memset(ups, 0, sizeof ups);
    sample_record(&r, 0);
    ups[0].state = GOSSIP_ALIVE;
    sign_or_fail(&r, 0, &ups[0].rec, __LINE__);
    ups[1].state = GOSSIP_SUSPECT;
    memset(ups[1].wg_pub, 0x33, GOSSIP_KEY_LEN);
    ups[1].incarnation = 12;
    strcpy(ups[1].from, "node-2");
    ups[2].state = GOSSIP_DEAD;
    memset(ups[2].wg_pub, 0x44, GOSSIP_KEY_LEN);
    ups[2].incarnation = UINT64_MAX;
    strcpy(ups[2].from, "n");
    sample_record(&r, 1);
    r.left = 1;
    r.nendpoints = 0;
    r.devices[0] = 0;
    ups[3].state = GOSSIP_LEFT;
    sign_or_fail(&r, 1, &ups[3].rec, __LINE__);
}

static gossip_msg sample_msg(gossip_msg_type t)
{
    gossip_msg m;
    memset(&m, 0, sizeof m);
    m.type = t;
    for (int j = 0; j < GOSSIP_MESH_ID_LEN; j++)
        m.mesh_id[j] = (uint8_t)(0xa0 + j);
    strcpy(m.from, "node-0");
    switch (t) {
    case GOSSIP_MSG_PING:
        m.seq = 42, m.updates = ups, m.nupdates = 2;
        break;
    case GOSSIP_MSG_ACK:
        m.seq = UINT32_MAX, m.updates = ups + 2, m.nupdates = 1;
        strcpy(m.observed, "198.51.100.9:40000");
        break;
    case GOSSIP_MSG_PING_REQ:
        m.seq = 7, m.target_port = 65535;
        strcpy(m.target, "10.77.3.4");
        break;
    case GOSSIP_MSG_SYNC:
        m.flags = GOSSIP_SYNC_REPLY, m.updates = ups, m.nupdates = 4;
        break;
    case GOSSIP_MSG_JOIN:
        for (int j = 0; j < GOSSIP_SECRET_LEN; j++)
            m.secret[j] = (uint8_t)(0xf0 ^ j);
        m.updates = ups, m.nupdates = 1;
        break;
    case GOSSIP_MSG_JOIN_REPLY:
        m.ok = 1, m.updates = ups, m.nupdates = 3;
        break;
    case GOSSIP_MSG_UPDATE:
        m.updates = ups + 3, m.nupdates = 1;
        break;
    case GOSSIP_MSG_FETCH:
        strcpy(m.path, "jobs/run-1/plan.json");
        m.offset = 12345;
        break;
    case GOSSIP_MSG_FETCH_REPLY:
        m.ok = 1, m.offset = 1000, m.total = 1000 + sizeof chunk + 7;
        m.data = chunk, m.data_len = sizeof chunk;
        break;
    case GOSSIP_MSG_PUNCH:
        memset(m.punch_from, 0x11, GOSSIP_KEY_LEN);
        memset(m.punch_to, 0x22, GOSSIP_KEY_LEN);
        m.punch_n = UINT64_MAX - 1;
        memset(m.punch_mac, 0x5c, GOSSIP_PUNCH_MAC_LEN);
        break;
    case GOSSIP_MSG_RELAY:
        memset(m.punch_from, 0x11, GOSSIP_KEY_LEN);
        memset(m.punch_to, 0x22, GOSSIP_KEY_LEN);
        memset(m.relay_via, 0x33, GOSSIP_KEY_LEN);
        m.punch_n = 1760000000001ull;
        memset(m.punch_mac, 0x5d, GOSSIP_PUNCH_MAC_LEN);
        m.relay_ports = 40001u << 16 | 40002u;
        break;
    }
    return m;
}

/* Decodes from a heap block of exactly len bytes. */
static int decode_exact(const void *buf, size_t len, gossip_msg *out, char *err, size_t errlen)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (len)
        memcpy(copy, buf, len);
    int rc = gossip_decode(copy, len, out, err, errlen);
    free(copy);
    return rc;
}

static int is_zero(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

static int same_update(const gossip_update *a, const gossip_update *b)
{
    if (a->state != b->state)
        return 0;
    if (a->state == GOSSIP_ALIVE || a->state == GOSSIP_LEFT)
        return a->rec.len == b->rec.len && memcmp(a->rec.bytes, b->rec.bytes, a->rec.len) == 0 &&
               memcmp(a->rec.sig, b->rec.sig, GOSSIP_SIG_LEN) == 0 &&
               memcmp(a->rec.adm.by, b->rec.adm.by, GOSSIP_KEY_LEN) == 0 &&
               a->rec.adm.at_ms == b->rec.adm.at_ms &&
               memcmp(a->rec.adm.sig, b->rec.adm.sig, GOSSIP_SIG_LEN) == 0;
    return memcmp(a->wg_pub, b->wg_pub, GOSSIP_KEY_LEN) == 0 &&
           a->incarnation == b->incarnation && strcmp(a->from, b->from) == 0;
}

/* Every field a type carries (the others are zero in the samples). */
static int same_msg(const gossip_msg *a, const gossip_msg *b)
{
    int ok = a->type == b->type && memcmp(a->mesh_id, b->mesh_id, GOSSIP_MESH_ID_LEN) == 0 &&
             strcmp(a->from, b->from) == 0 && a->seq == b->seq && a->flags == b->flags &&
             strcmp(a->target, b->target) == 0 && a->target_port == b->target_port &&
             strcmp(a->observed, b->observed) == 0 &&
             memcmp(a->secret, b->secret, GOSSIP_SECRET_LEN) == 0 && a->ok == b->ok &&
             strcmp(a->reason, b->reason) == 0 && a->nupdates == b->nupdates &&
             strcmp(a->path, b->path) == 0 && a->offset == b->offset && a->total == b->total &&
             a->data_len == b->data_len && (!a->data_len || memcmp(a->data, b->data, a->data_len) == 0) &&
             memcmp(a->punch_from, b->punch_from, GOSSIP_KEY_LEN) == 0 &&
             memcmp(a->punch_to, b->punch_to, GOSSIP_KEY_LEN) == 0 && a->punch_n == b->punch_n &&
             memcmp(a->punch_mac, b->punch_mac, GOSSIP_PUNCH_MAC_LEN) == 0;
    for (int i = 0; ok && i < a->nupdates; i++)
        ok = same_update(&a->updates[i], &b->updates[i]);
    return ok;
}

static int same_record(const gossip_record *a, const gossip_record *b)
{
    int ok = memcmp(a->mesh_id, b->mesh_id, GOSSIP_MESH_ID_LEN) == 0 &&
             strcmp(a->name, b->name) == 0 && memcmp(a->wg_pub, b->wg_pub, GOSSIP_KEY_LEN) == 0 &&
             memcmp(a->id_pub, b->id_pub, GOSSIP_KEY_LEN) == 0 &&
             strcmp(a->address, b->address) == 0 && a->port == b->port &&
             a->incarnation == b->incarnation && a->left == b->left &&
             a->nendpoints == b->nendpoints && strcmp(a->software, b->software) == 0 &&
             a->protocol == b->protocol && a->mem_free == b->mem_free &&
             strcmp(a->devices, b->devices) == 0 && a->signed_ms == b->signed_ms &&
             a->nat == b->nat && strcmp(a->job, b->job) == 0;
    for (int i = 0; ok && i < a->nendpoints; i++)
        ok = strcmp(a->endpoints[i], b->endpoints[i]) == 0;
    return ok;
}

static uint8_t *encode_or_fail(const gossip_msg *m, size_t *len, int line)
{
    uint8_t *buf = malloc(GOSSIP_TCP_MAX);
    char err[256] = "";
    if (gossip_encode(m, buf, GOSSIP_TCP_MAX, len, err, sizeof err) != 0) {
        CHECK(0, "line %d: encode %s: %s", line, type_names[m->type], err);
        free(buf);
        return NULL;
    }
    return buf;
}

static void round_trip(const gossip_msg *m, int line)
{
    size_t len = 0;
    uint8_t *buf = encode_or_fail(m, &len, line);
    if (!buf)
        return;
    gossip_msg back;
    char err[256] = "";
    int rc = decode_exact(buf, len, &back, err, sizeof err);
    CHECK(rc == 0, "line %d: decode %s: %s", line, type_names[m->type], err);
    if (rc == 0) {
        CHECK(back.version == GOSSIP_PROTOCOL_VERSION, "line %d: version %u", line, back.version);
        CHECK(same_msg(m, &back), "line %d: %s changed in a round trip", line,
              type_names[m->type]);
        /* Deterministic: the decoded message encodes to the same bytes. */
        uint8_t *again = malloc(len);
        size_t again_len = 0;
        CHECK(gossip_encode(&back, again, len, &again_len, err, sizeof err) == 0 &&
                  again_len == len && memcmp(again, buf, len) == 0,
              "line %d: %s re-encodes differently: %s", line, type_names[m->type], err);
        free(again);
        gossip_msg_free(&back);
        CHECK(back.updates == NULL && back.nupdates == 0 && back.data == NULL &&
                  back.data_len == 0,
              "gossip_msg_free leaves updates or data");
    }
    free(buf);
}

/* Maps built field by field with msgpack-c's packer, so a test can put keys
 * in any order, use any width, or break exactly one thing. */
typedef enum { F_UINT, F_INT, F_STR, F_BIN, F_BOOL, F_NIL, F_RAW, F_U64W } fkind;
typedef struct {
    const char *key;
    fkind kind;
    uint64_t u;
    int64_t i;
    const void *p; /* F_STR, F_BIN, F_RAW: bytes */
    size_t n;
} field;

#define U(k, v) ((field){.key = (k), .kind = F_UINT, .u = (v)})
#define U64W(k, v) ((field){.key = (k), .kind = F_U64W, .u = (v)})
#define I(k, v) ((field){.key = (k), .kind = F_INT, .i = (v)})
#define S(k, s) ((field){.key = (k), .kind = F_STR, .p = (s), .n = strlen(s)})
#define B(k, b, len) ((field){.key = (k), .kind = F_BIN, .p = (b), .n = (len)})
#define BOOL(k, v) ((field){.key = (k), .kind = F_BOOL, .u = (v)})
#define NIL(k) ((field){.key = (k), .kind = F_NIL})
#define RAW(k, b, len) ((field){.key = (k), .kind = F_RAW, .p = (b), .n = (len)})
#define MAXF 24

static void pack_value(msgpack_packer *pk, msgpack_sbuffer *sb, const field *f)
{
    switch (f->kind) {
    case F_UINT: msgpack_pack_uint64(pk, f->u); break;
    case F_U64W: {
        /* A uint64 in its widest form, whatever the value. */
        uint8_t b[9] = {0xcf};
        for (int j = 0; j < 8; j++)
            b[1 + j] = (uint8_t)(f->u >> (56 - 8 * j));
        msgpack_sbuffer_write(sb, (const char *)b, 9);
        break;
    }
    case F_INT: msgpack_pack_int64(pk, f->i); break;
    case F_STR:
        msgpack_pack_str(pk, f->n);
        msgpack_pack_str_body(pk, f->p, f->n);
        break;
    case F_BIN:
        msgpack_pack_bin(pk, f->n);
        msgpack_pack_bin_body(pk, f->p, f->n);
        break;
    case F_BOOL: f->u ? msgpack_pack_true(pk) : msgpack_pack_false(pk); break;
    case F_NIL: msgpack_pack_nil(pk); break;
    case F_RAW: msgpack_sbuffer_write(sb, f->p, f->n); break;
    }
}

/* The map of f[0..n) (malloc'ed), followed by `extra` raw bytes. */
static uint8_t *pack_fields(const field *f, size_t n, const void *extra, size_t nextra,
                            size_t *len)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, n);
    for (size_t i = 0; i < n; i++) {
        msgpack_pack_str(&pk, strlen(f[i].key));
        msgpack_pack_str_body(&pk, f[i].key, strlen(f[i].key));
        pack_value(&pk, &sb, &f[i]);
    }
    if (nextra)
        msgpack_sbuffer_write(&sb, extra, nextra);
    *len = sb.size;
    return (uint8_t *)msgpack_sbuffer_release(&sb);
}

/* Replaces the field with f's key, or appends it. */
static size_t set(field *fs, size_t n, field f)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(fs[i].key, f.key) == 0) {
            fs[i] = f;
            return n;
        }
    fs[n] = f;
    return n + 1;
}

static size_t drop(field *fs, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(fs[i].key, key) == 0) {
            memmove(fs + i, fs + i + 1, (n - i - 1) * sizeof *fs);
            return n - 1;
        }
    return n;
}

static size_t add(field *fs, size_t n, field f)
{
    fs[n] = f;
    return n + 1;
}

static const uint8_t mesh_id[GOSSIP_MESH_ID_LEN] = {0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5,
                                                    0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab,
                                                    0xac, 0xad, 0xae, 0xaf};
static const uint8_t secret[GOSSIP_SECRET_LEN] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

/* "up" of exactly one update built from fields: an array of one map. */
static uint8_t one_update[GOSSIP_RECORD_MAX + 256];
static size_t one_update_len;

static field up_of(const field *uf, size_t un)
{
    size_t len = 0;
    uint8_t *map = pack_fields(uf, un, NULL, 0, &len);
    one_update[0] = 0x91;
    memcpy(one_update + 1, map, len);
    one_update_len = len + 1;
    free(map);
    return RAW("up", one_update, one_update_len);
}

/* A valid update of each kind, as fields. */
static size_t alive_fields(field *uf)
{
    size_t n = 0;
    uf[n++] = U("s", GOSSIP_ALIVE);
    uf[n++] = B("r", ups[0].rec.bytes, ups[0].rec.len);
    uf[n++] = B("g", ups[0].rec.sig, GOSSIP_SIG_LEN);
    return n;
}

static size_t suspect_fields(field *uf)
{
    size_t n = 0;
    uf[n++] = U("s", GOSSIP_SUSPECT);
    uf[n++] = B("w", ups[1].wg_pub, GOSSIP_KEY_LEN);
    uf[n++] = U("inc", 12);
    uf[n++] = S("by", "node-2");
    return n;
}

/* A valid message of type t, as fields. */
static size_t base(field *f, gossip_msg_type t)
{
    size_t n = 0;
    f[n++] = U("v", GOSSIP_PROTOCOL_VERSION);
    f[n++] = U("t", t);
    f[n++] = B("mesh", mesh_id, sizeof mesh_id);
    f[n++] = S("from", "node-0");
    switch (t) {
    case GOSSIP_MSG_PING: f[n++] = U("seq", 3); break;
    case GOSSIP_MSG_ACK:
        f[n++] = U("seq", 3);
        f[n++] = S("obs", "198.51.100.9:40000");
        break;
    case GOSSIP_MSG_PING_REQ:
        f[n++] = U("seq", 3);
        f[n++] = S("target", "10.77.0.9");
        f[n++] = U("tport", 7946);
        break;
    case GOSSIP_MSG_SYNC: f[n++] = U("fl", 0); break;
    case GOSSIP_MSG_JOIN: {
        f[n++] = B("secret", secret, sizeof secret);
        field uf[8];
        f[n++] = up_of(uf, alive_fields(uf));
        break;
    }
    case GOSSIP_MSG_JOIN_REPLY:
        f[n++] = BOOL("ok", 0);
        f[n++] = S("reason", "token already used");
        break;
    case GOSSIP_MSG_UPDATE: {
        field uf[8];
        f[n++] = up_of(uf, suspect_fields(uf));
        break;
    }
    case GOSSIP_MSG_FETCH:
        f[n++] = S("path", "jobs/run-1/plan.json");
        f[n++] = U("off", 0);
        break;
    case GOSSIP_MSG_FETCH_REPLY:
        f[n++] = BOOL("ok", 1);
        f[n++] = U("off", 10);
        f[n++] = U("total", 10 + sizeof chunk);
        f[n++] = B("data", chunk, sizeof chunk);
        break;
    case GOSSIP_MSG_PUNCH: {
        static const uint8_t a[GOSSIP_KEY_LEN] = {1}, b[GOSSIP_KEY_LEN] = {2};
        static const uint8_t mac[GOSSIP_PUNCH_MAC_LEN] = {3};
        f[n++] = B("pa", a, sizeof a);
        f[n++] = B("pb", b, sizeof b);
        f[n++] = U("pn", 1760000000000ull);
        f[n++] = B("pm", mac, sizeof mac);
        break;
    }
    case GOSSIP_MSG_RELAY: {
        static const uint8_t a[GOSSIP_KEY_LEN] = {1}, b[GOSSIP_KEY_LEN] = {2}, v[GOSSIP_KEY_LEN] = {4};
        static const uint8_t mac[GOSSIP_PUNCH_MAC_LEN] = {3};
        f[n++] = B("pa", a, sizeof a);
        f[n++] = B("pb", b, sizeof b);
        f[n++] = U("pn", 1760000000000ull);
        f[n++] = B("pm", mac, sizeof mac);
        f[n++] = B("rv", v, sizeof v);
        f[n++] = U("rp", 0);
        break;
    }
    }
    return n;
}

static int decode_fields(const field *f, size_t n, gossip_msg *m, char *err, size_t errlen)
{
    size_t len = 0;
    uint8_t *p = pack_fields(f, n, NULL, 0, &len);
    int rc = decode_exact(p, len, m, err, errlen);
    free(p);
    return rc;
}

static void expect_refused(const field *f, size_t n, const char *extra, size_t nextra,
                           const char *want, int line)
{
    size_t len = 0;
    uint8_t *p = pack_fields(f, n, extra, nextra, &len);
    gossip_msg m;
    memset(&m, 0xee, sizeof m);
    char err[512] = "";
    int rc = decode_exact(p, len, &m, err, sizeof err);
    CHECK(rc != 0 && strstr(err, want) && is_zero(&m, sizeof m),
          "line %d: want '%s', got rc=%d '%s'", line, want, rc, err);
    if (rc == 0)
        gossip_msg_free(&m);
    free(p);
}

#define EXPECT_REFUSED(f, n, want) expect_refused(f, n, NULL, 0, want, __LINE__)

/* Hand-made records, properly signed, so open judges their contents. */
static void expect_record(const field *f, size_t n, const void *extra, size_t nextra,
                          const char *want, int line)
{
    gossip_signed s;
    memset(&s, 0, sizeof s);
    size_t len = 0;
    uint8_t *p = pack_fields(f, n, extra, nextra, &len);
    char err[512] = "";
    CHECK(len <= GOSSIP_RECORD_MAX, "line %d: %zu bytes", line, len);
    if (len > GOSSIP_RECORD_MAX)
        len = GOSSIP_RECORD_MAX;
    memcpy(s.bytes, p, len);
    s.len = len;
    free(p);
    CHECK(keys_sign(priv[0], s.bytes, s.len, s.sig, err, sizeof err) == 0, "%s", err);
    gossip_record r;
    memset(&r, 0xee, sizeof r);
    int rc = gossip_record_open(&s, &r, err, sizeof err);
    if (!want)
        CHECK(rc == 0, "line %d: refused: %s", line, err);
    else
        CHECK(rc != 0 && strstr(err, want) && is_zero(&r, sizeof r),
              "line %d: want '%s', got rc=%d '%s'", line, want, rc, err);
}

static size_t record_fields(field *f)
{
    static const char *eps[] = {"203.0.113.7:51820", "[2001:db8::7]:51820"};
    static uint8_t ep_raw[128];
    size_t o = 0;
    ep_raw[o++] = 0x92;
    for (int i = 0; i < 2; i++) {
        ep_raw[o++] = (uint8_t)(0xa0 | strlen(eps[i]));
        memcpy(ep_raw + o, eps[i], strlen(eps[i]));
        o += strlen(eps[i]);
    }
    static uint8_t wg[32];
    memset(wg, 0x10, sizeof wg);
    size_t n = 0;
    f[n++] = B("mesh", mesh_id, sizeof mesh_id);
    f[n++] = S("name", "node-0");
    f[n++] = B("wg", wg, sizeof wg);
    f[n++] = B("id", pub[0], KEYS_LEN);
    f[n++] = S("addr", "10.77.3.4");
    f[n++] = U("port", 7946);
    f[n++] = U("inc", 5);
    f[n++] = BOOL("left", 0);
    f[n++] = RAW("ep", ep_raw, o);
    f[n++] = S("sw", "shardnode 0.1.0");
    f[n++] = U("proto", 1);
    f[n++] = U("mem", 1);
    f[n++] = S("dev", "");
    f[n++] = I("t", -5);
    return n;
}

#define EXPECT_RECORD(f, n, want) expect_record(f, n, NULL, 0, want, __LINE__)

static void expect_encode_refused(const gossip_msg *m, const char *want, int line)
{
    uint8_t buf[4096];
    size_t len = 77;
    char err[512] = "";
    int rc = gossip_encode(m, buf, sizeof buf, &len, err, sizeof err);
    CHECK(rc != 0 && strstr(err, want) && len == 0, "line %d: want '%s', got rc=%d '%s'", line,
          want, rc, err);
}

#pragma GCC diagnostic pop

#endif

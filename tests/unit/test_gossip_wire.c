/* test_gossip_wire.c — the gossip codec (mesh/gossip_wire.c): signed member
 * records (gossip_record_sign / gossip_record_open) and the SWIM messages
 * (gossip_encode / gossip_decode). What the membership layer relies on: every
 * message of every type arrives with every field intact; a record opens only
 * with its owner's signature over exactly its bytes; damaged input (truncated
 * at any byte, randomly mutated, hand-made with one thing wrong) is refused
 * with a message naming the field, never read out of bounds, never leaks.
 * Every decode reads from a heap block of exactly the input's size, so under
 * ASan a read one byte too far is a failure. */
#include "keys.h"
#include "mesh.h"

#include <inttypes.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static const char *type_names[] = {"?",    "PING",       "ACK",    "PING_REQ",
                                   "SYNC", "JOIN",       "JOIN_REPLY", "UPDATE",
                                   "FETCH", "FETCH_REPLY"};
#define LAST_TYPE GOSSIP_MSG_FETCH_REPLY

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
             a->data_len == b->data_len && (!a->data_len || memcmp(a->data, b->data, a->data_len) == 0);
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
             strcmp(a->job, b->job) == 0;
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
        CHECK(back.version == MESH_PROTOCOL_VERSION, "line %d: version %u", line, back.version);
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

/* ------------------------------------------------------------ round trips */

static void test_round_trip_every_type(void)
{
    for (int t = GOSSIP_MSG_PING; t <= LAST_TYPE; t++) {
        gossip_msg m = sample_msg((gossip_msg_type)t);
        round_trip(&m, __LINE__);
        /* Without updates ("up" left out), where a type may have none. */
        if (t != GOSSIP_MSG_JOIN && t != GOSSIP_MSG_PING_REQ) {
            m.nupdates = 0, m.updates = NULL;
            round_trip(&m, __LINE__);
        }
    }

    /* Extremes: longest names and strings, a refused join, an IPv6 target,
     * an empty observed endpoint, a SYNC request. */
    gossip_msg m = sample_msg(GOSSIP_MSG_JOIN_REPLY);
    memset(m.from, 'z', MESH_NAME_MAX - 1);
    m.from[MESH_NAME_MAX - 1] = 0;
    m.ok = 0, m.nupdates = 0;
    memset(m.reason, 'r', MESH_TEXT_MAX - 1);
    m.reason[MESH_TEXT_MAX - 1] = 0;
    round_trip(&m, __LINE__);
    m = sample_msg(GOSSIP_MSG_PING_REQ);
    strcpy(m.target, "fd5a:0:0:0:ffff:ffff:ffff:ffff");
    m.target_port = 1, m.seq = 0;
    round_trip(&m, __LINE__);
    m = sample_msg(GOSSIP_MSG_ACK);
    m.observed[0] = 0;
    round_trip(&m, __LINE__);
    strcpy(m.observed, "[2001:db8:ffff:ffff:ffff:ffff:ffff:ffff]:65535");
    round_trip(&m, __LINE__);
    m = sample_msg(GOSSIP_MSG_SYNC);
    m.flags = 0;
    round_trip(&m, __LINE__);

    /* The most updates one message holds: a full SYNC over TCP. */
    gossip_update *many = calloc(GOSSIP_MAX_UPDATES, sizeof *many);
    for (int i = 0; i < GOSSIP_MAX_UPDATES; i++)
        many[i] = ups[i % 4];
    m = sample_msg(GOSSIP_MSG_SYNC);
    m.updates = many, m.nupdates = GOSSIP_MAX_UPDATES;
    round_trip(&m, __LINE__);
    free(many);

    /* A PING with two piggybacked updates fits a datagram. */
    m = sample_msg(GOSSIP_MSG_PING);
    uint8_t dgram[GOSSIP_UDP_MAX];
    size_t len = 0;
    char err[256] = "";
    CHECK(gossip_encode(&m, dgram, sizeof dgram, &len, err, sizeof err) == 0 && len > 0,
          "PING in a datagram: %s", err);

    /* The encoder ignores m->version and writes its own. */
    m.version = 9;
    round_trip(&m, __LINE__);
}

/* The example in docs/PROTOCOL.md, byte for byte. */
static void test_doc_example(void)
{
    static const uint8_t ping[] = {
        0x85, 0xa1, 0x76, 0x01, 0xa1, 0x74, 0x01, 0xa4, 0x6d, 0x65, 0x73, 0x68, 0xc4,
        0x10, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b,
        0x0c, 0x0d, 0x0e, 0x0f, 0xa4, 0x66, 0x72, 0x6f, 0x6d, 0xa2, 0x6e, 0x31, 0xa3,
        0x73, 0x65, 0x71, 0x07,
    };
    gossip_msg m;
    memset(&m, 0, sizeof m);
    m.type = GOSSIP_MSG_PING, m.seq = 7;
    for (int j = 0; j < GOSSIP_MESH_ID_LEN; j++)
        m.mesh_id[j] = (uint8_t)j;
    strcpy(m.from, "n1");
    uint8_t buf[64];
    size_t len = 0;
    char err[256] = "";
    CHECK(gossip_encode(&m, buf, sizeof buf, &len, err, sizeof err) == 0 && len == sizeof ping &&
              memcmp(buf, ping, sizeof ping) == 0,
          "PING differs from docs/PROTOCOL.md (%zu bytes) %s", len, err);
}

/* ---------------------------------------------------------------- records */

static void test_records(void)
{
    char err[256] = "";
    gossip_record r, back;
    gossip_signed s;

    /* Sign and open: every field back, extremes included. */
    sample_record(&r, 0);
    sign_or_fail(&r, 0, &s, __LINE__);
    CHECK(s.len > 0 && s.len <= GOSSIP_RECORD_MAX, "record of %zu bytes", s.len);
    CHECK(gossip_record_open(&s, &back, err, sizeof err) == 0 && same_record(&r, &back),
          "open: %s", err);

    sample_record(&r, 1);
    memset(r.name, 'N', MESH_NAME_MAX - 1);
    r.name[MESH_NAME_MAX - 1] = 0;
    strcpy(r.address, "fd5a:1234:5678:9abc:def0:1234:5678:9abc");
    r.port = 65535, r.incarnation = UINT64_MAX, r.left = 1;
    r.nendpoints = GOSSIP_MAX_ENDPOINTS;
    for (int i = 0; i < GOSSIP_MAX_ENDPOINTS; i++) {
        memset(r.endpoints[i], 'h', MESH_WG_ENDPOINT_MAX - 7);
        strcpy(r.endpoints[i] + MESH_WG_ENDPOINT_MAX - 7, ":51820");
    }
    memset(r.software, 's', GOSSIP_SOFTWARE_MAX - 1);
    r.software[GOSSIP_SOFTWARE_MAX - 1] = 0;
    r.protocol = UINT32_MAX, r.mem_free = UINT64_MAX;
    memset(r.devices, 'd', GOSSIP_DEVICES_MAX - 1);
    r.devices[GOSSIP_DEVICES_MAX - 1] = 0;
    r.signed_ms = INT64_MIN;
    sign_or_fail(&r, 1, &s, __LINE__);
    CHECK(s.len <= GOSSIP_RECORD_MAX, "the largest record takes %zu bytes", s.len);
    CHECK(gossip_record_open(&s, &back, err, sizeof err) == 0 && same_record(&r, &back),
          "open the largest record: %s", err);
    r.nendpoints = 0, r.devices[0] = 0, r.software[0] = 0, r.signed_ms = -1, r.left = 0;
    sign_or_fail(&r, 1, &s, __LINE__);
    CHECK(gossip_record_open(&s, &back, err, sizeof err) == 0 && same_record(&r, &back),
          "open the smallest record: %s", err);

    /* One flipped byte anywhere, in the bytes or in the signature: refused
     * (malformed, or the signature does not verify), and nothing returned. */
    sample_record(&r, 0);
    sign_or_fail(&r, 0, &s, __LINE__);
    int bad_sig = 0;
    for (size_t i = 0; i < s.len; i++) {
        gossip_signed d = s;
        d.bytes[i] ^= 0x01;
        int rc = gossip_record_open(&d, &back, err, sizeof err);
        CHECK(rc != 0 && err[0] && is_zero(&back, sizeof back), "byte %zu flipped: accepted", i);
        bad_sig += strstr(err, "signature does not verify") != NULL;
    }
    CHECK(bad_sig > 0, "no flip reached the signature check");
    for (size_t i = 0; i < GOSSIP_SIG_LEN; i++) {
        gossip_signed d = s;
        d.sig[i] ^= 0x80;
        int rc = gossip_record_open(&d, &back, err, sizeof err);
        CHECK(rc != 0 && strstr(err, "record of node-0: signature does not verify") &&
                  is_zero(&back, sizeof back),
              "sig byte %zu flipped: rc=%d '%s'", i, rc, err);
    }
    /* Another key's valid signature over the same bytes. */
    gossip_signed d = s;
    CHECK(keys_sign(priv[1], d.bytes, d.len, d.sig, err, sizeof err) == 0, "%s", err);
    CHECK(gossip_record_open(&d, &back, err, sizeof err) != 0 &&
              strstr(err, "record of node-0: signature does not verify"),
          "signed by another key: %s", err);
    /* A length that is not the record's. */
    d = s, d.len = s.len + 1;
    CHECK(gossip_record_open(&d, &back, err, sizeof err) != 0 && strstr(err, "trailing byte"),
          "one byte more: %s", err);
    d = s, d.len = GOSSIP_RECORD_MAX + 1;
    CHECK(gossip_record_open(&d, &back, err, sizeof err) != 0 && strstr(err, "12289 bytes"),
          "oversized length: %s", err);
    d = s, d.len = 0;
    CHECK(gossip_record_open(&d, &back, err, sizeof err) != 0, "empty record accepted");

    /* Sign refuses a key that is not the record's id_pub. */
    gossip_signed out;
    memset(&out, 0xee, sizeof out);
    CHECK(gossip_record_sign(&r, priv[1], &out, err, sizeof err) != 0 &&
              strstr(err, "record of node-0") && strstr(err, "not the private key") &&
              is_zero(&out, sizeof out),
          "signed with another key: %s", err);

    /* Sign refuses what open would refuse, naming the field. */
    struct {
        const char *want;
        int what;
    } cases[] = {
        {"gossip record: field \"name\": \"\" is not a node name", 0},
        {"gossip record: field \"name\": \"a b\" is not a node name", 1},
        {"record of node-0: field \"addr\": \"10.77.0.300\" is not an IPv4 or IPv6 address", 2},
        {"record of node-0: field \"port\": is 0, expected 1 to 65535", 3},
        {"record of node-0: field \"left\": is 2, expected 0 or 1", 4},
        {"record of node-0: field \"ep\": 5 endpoints, expected 0 to 4", 5},
        {"record of node-0: field \"ep[1]\": \"1.2.3.4\" is not an endpoint", 6},
        {"record of node-0: field \"sw\": is longer than 31 bytes", 7},
        {"record of node-0: field \"dev\": is longer than 1023 bytes", 8},
        {"gossip record: field \"name\": is longer than 63 bytes", 9},
        {"record of node-0: field \"addr\": \"\" is not an IPv4 or IPv6 address", 10},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sample_record(&r, 0);
        switch (cases[i].what) {
        case 0: r.name[0] = 0; break;
        case 1: strcpy(r.name, "a b"); break;
        case 2: strcpy(r.address, "10.77.0.300"); break;
        case 3: r.port = 0; break;
        case 4: r.left = 2; break;
        case 5: r.nendpoints = 5; break;
        case 6: strcpy(r.endpoints[1], "1.2.3.4"); break;
        case 7: memset(r.software, 's', sizeof r.software); break;
        case 8: memset(r.devices, 'd', sizeof r.devices); break;
        case 9: memset(r.name, 'n', sizeof r.name); break;
        case 10: r.address[0] = 0; break;
        }
        err[0] = 0;
        CHECK(gossip_record_sign(&r, priv[0], &out, err, sizeof err) != 0 &&
                  strstr(err, cases[i].want) && is_zero(&out, sizeof out),
              "sign case %d: want '%s', got '%s'", cases[i].what, cases[i].want, err);
    }
}

/* ------------------------------------------------------ hand-made inputs */

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
    f[n++] = U("v", MESH_PROTOCOL_VERSION);
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

static void test_hand_made_accepted(void)
{
    field f[MAXF];
    gossip_msg m;
    char err[512] = "";
    /* Every base is valid; other widths and key orders are fine. */
    for (int t = GOSSIP_MSG_PING; t <= LAST_TYPE; t++) {
        size_t n = base(f, (gossip_msg_type)t);
        int rc = decode_fields(f, n, &m, err, sizeof err);
        CHECK(rc == 0 && m.type == (gossip_msg_type)t, "base %s: %s", type_names[t], err);
        if (rc == 0)
            gossip_msg_free(&m);
        /* Reversed key order. */
        for (size_t i = 0; i < n / 2; i++) {
            field x = f[i];
            f[i] = f[n - 1 - i], f[n - 1 - i] = x;
        }
        rc = decode_fields(f, n, &m, err, sizeof err);
        CHECK(rc == 0 && m.type == (gossip_msg_type)t, "reversed %s: %s", type_names[t], err);
        if (rc == 0)
            gossip_msg_free(&m);
    }
    size_t n = base(f, GOSSIP_MSG_PING);
    n = set(f, n, U64W("seq", 5));
    n = set(f, n, U64W("v", 1));
    CHECK(decode_fields(f, n, &m, err, sizeof err) == 0 && m.seq == 5, "wide ints: %s", err);
    /* An empty "up" is the same as none. */
    static const uint8_t empty_array[] = {0x90};
    n = add(f, n, RAW("up", empty_array, 1));
    CHECK(decode_fields(f, n, &m, err, sizeof err) == 0 && m.nupdates == 0 && !m.updates,
          "empty up: %s", err);
    /* The decoder copies records, it does not open them. */
    field uf[8];
    size_t un = alive_fields(uf);
    uint8_t junk[3] = {1, 2, 3};
    un = set(uf, un, B("r", junk, 3));
    n = base(f, GOSSIP_MSG_PING), n = add(f, n, up_of(uf, un));
    int rc = decode_fields(f, n, &m, err, sizeof err);
    CHECK(rc == 0 && m.nupdates == 1 && m.updates[0].rec.len == 3 &&
              memcmp(m.updates[0].rec.bytes, junk, 3) == 0,
          "record not opened: %s", err);
    if (rc == 0) {
        gossip_record r;
        CHECK(gossip_record_open(&m.updates[0].rec, &r, err, sizeof err) != 0 &&
                  strstr(err, "gossip record:"),
              "junk record opened: %s", err);
        gossip_msg_free(&m);
    }
    gossip_msg_free(NULL);
}

static void test_refusals(void)
{
    field f[MAXF], uf[8];
    size_t n, un;
    char err[512] = "";
    gossip_msg m;

    /* Not a message. */
    CHECK(decode_exact("", 0, &m, err, sizeof err) != 0 && strstr(err, "empty message"),
          "empty: %s", err);
    CHECK(gossip_decode(NULL, 5, &m, err, sizeof err) != 0 && strstr(err, "empty message"),
          "NULL: %s", err);
    static const uint8_t array[] = {0x91, 0x01};
    CHECK(decode_exact(array, 2, &m, err, sizeof err) != 0 &&
              strstr(err, "gossip message: expected a map, got an array"),
          "array: %s", err);

    /* Another version first, whatever else is wrong. */
    n = base(f, GOSSIP_MSG_PING), n = set(f, n, U("v", 2)), n = add(f, n, U("zz", 1));
    EXPECT_REFUSED(f, n, "gossip: protocol version 2, this node speaks 1");
    n = base(f, GOSSIP_MSG_PING), n = drop(f, n, "v");
    EXPECT_REFUSED(f, n, "gossip PING: missing key \"v\"");
    n = base(f, GOSSIP_MSG_PING), n = drop(f, n, "t");
    EXPECT_REFUSED(f, n, "gossip message: missing key \"t\"");
    n = base(f, GOSSIP_MSG_PING), n = set(f, n, U("t", 10));
    EXPECT_REFUSED(f, n, "gossip message: field \"t\": is 10, not a gossip message type (1 to 9)");
    n = base(f, GOSSIP_MSG_PING), n = set(f, n, U("t", 0));
    EXPECT_REFUSED(f, n, "field \"t\": is 0, not a gossip message type");

    /* Wrong msgpack types, naming the field. */
    n = base(f, GOSSIP_MSG_PING), n = set(f, n, S("seq", "7"));
    EXPECT_REFUSED(f, n, "gossip PING: field \"seq\": expected an unsigned integer, got a string");
    n = base(f, GOSSIP_MSG_PING), n = set(f, n, NIL("seq"));
    EXPECT_REFUSED(f, n, "gossip PING: field \"seq\": expected an unsigned integer, got nil");
    n = base(f, GOSSIP_MSG_PING), n = set(f, n, I("seq", -1));
    EXPECT_REFUSED(f, n, "gossip PING: field \"seq\": expected an unsigned integer, got -1");
    n = base(f, GOSSIP_MSG_PING), n = set(f, n, U("seq", (uint64_t)UINT32_MAX + 1));
    EXPECT_REFUSED(f, n, "gossip PING: field \"seq\": is 4294967296, expected 0 to 4294967295");
    n = base(f, GOSSIP_MSG_PING), n = set(f, n, S("mesh", "abc"));
    EXPECT_REFUSED(f, n, "gossip PING: field \"mesh\": expected a bin, got a string");
    n = base(f, GOSSIP_MSG_PING), n = set(f, n, B("mesh", mesh_id, 15));
    EXPECT_REFUSED(f, n, "gossip PING: field \"mesh\": is a bin of 15 bytes, expected 16");
    n = base(f, GOSSIP_MSG_PING), n = set(f, n, U("from", 1));
    EXPECT_REFUSED(f, n, "gossip PING: field \"from\": expected a string, got an integer");
    n = base(f, GOSSIP_MSG_JOIN_REPLY), n = set(f, n, U("ok", 1));
    EXPECT_REFUSED(f, n, "gossip JOIN_REPLY: field \"ok\": expected a boolean, got an integer");
    n = base(f, GOSSIP_MSG_SYNC), n = set(f, n, U("fl", 2));
    EXPECT_REFUSED(f, n, "gossip SYNC: field \"fl\": has unknown bits 0x2");
    n = base(f, GOSSIP_MSG_PING_REQ), n = set(f, n, U("tport", 0));
    EXPECT_REFUSED(f, n, "gossip PING_REQ: field \"tport\": is 0, expected 1 to 65535");
    n = base(f, GOSSIP_MSG_PING_REQ), n = set(f, n, U("tport", 65536));
    EXPECT_REFUSED(f, n, "gossip PING_REQ: field \"tport\": is 65536, expected 1 to 65535");
    n = base(f, GOSSIP_MSG_JOIN), n = set(f, n, B("secret", ups[0].rec.sig, 17));
    EXPECT_REFUSED(f, n, "gossip JOIN: field \"secret\": is a bin of 17 bytes, expected 16");
    n = base(f, GOSSIP_MSG_PING), n = set(f, n, S("up", "x"));
    EXPECT_REFUSED(f, n, "gossip PING: field \"up\": expected an array, got a string");

    /* Strings: bounds, NUL, names, addresses, endpoints. */
    n = base(f, GOSSIP_MSG_PING), n = set(f, n, S("from", "bad name"));
    EXPECT_REFUSED(f, n, "gossip PING: field \"from\": \"bad name\" is not a node name");
    n = base(f, GOSSIP_MSG_PING), n = set(f, n, S("from", ""));
    EXPECT_REFUSED(f, n, "gossip PING: field \"from\": \"\" is not a node name");
    n = base(f, GOSSIP_MSG_PING), n = set(f, n, S("from", "n\xc3\xa9"));
    EXPECT_REFUSED(f, n, "gossip PING: field \"from\": \"n??\" is not a node name");
    static char longname[MESH_NAME_MAX + 1];
    memset(longname, 'n', MESH_NAME_MAX);
    n = base(f, GOSSIP_MSG_PING), n = set(f, n, S("from", longname));
    EXPECT_REFUSED(f, n, "gossip PING: field \"from\": is 64 bytes, at most 63");
    n = base(f, GOSSIP_MSG_PING), n = set(f, n, ((field){.key = "from", .kind = F_STR,
                                                         .p = "ab\0c", .n = 4}));
    EXPECT_REFUSED(f, n, "gossip PING: field \"from\": contains a NUL byte");
    n = base(f, GOSSIP_MSG_PING_REQ), n = set(f, n, S("target", "10.77.0.300"));
    EXPECT_REFUSED(f, n,
                   "gossip PING_REQ: field \"target\": \"10.77.0.300\" is not an IPv4 or IPv6 address");
    n = base(f, GOSSIP_MSG_PING_REQ), n = set(f, n, S("target", "node-1"));
    EXPECT_REFUSED(f, n, "gossip PING_REQ: field \"target\": \"node-1\" is not an IPv4 or IPv6 address");
    n = base(f, GOSSIP_MSG_ACK), n = set(f, n, S("obs", "198.51.100.9"));
    EXPECT_REFUSED(f, n, "gossip ACK: field \"obs\": \"198.51.100.9\" is not an endpoint");
    static char longreason[MESH_TEXT_MAX + 1];
    memset(longreason, 'r', MESH_TEXT_MAX);
    n = base(f, GOSSIP_MSG_JOIN_REPLY), n = set(f, n, S("reason", longreason));
    EXPECT_REFUSED(f, n, "gossip JOIN_REPLY: field \"reason\": is 256 bytes, at most 255");

    /* Keys: unknown, duplicate, not the type's, missing, not a string. */
    n = base(f, GOSSIP_MSG_PING), n = add(f, n, U("zz", 1));
    EXPECT_REFUSED(f, n, "gossip PING: unknown key \"zz\"");
    n = base(f, GOSSIP_MSG_PING), n = add(f, n, U("seq", 1));
    EXPECT_REFUSED(f, n, "gossip PING: duplicate key \"seq\"");
    n = base(f, GOSSIP_MSG_PING), n = add(f, n, S("target", "10.0.0.1"));
    EXPECT_REFUSED(f, n, "gossip PING: key \"target\" is not allowed in PING");
    n = base(f, GOSSIP_MSG_PING_REQ), n = add(f, n, up_of(uf, suspect_fields(uf)));
    EXPECT_REFUSED(f, n, "gossip PING_REQ: key \"up\" is not allowed in PING_REQ");
    n = base(f, GOSSIP_MSG_UPDATE), n = add(f, n, U("seq", 1));
    EXPECT_REFUSED(f, n, "gossip UPDATE: key \"seq\" is not allowed in UPDATE");
    n = base(f, GOSSIP_MSG_ACK), n = drop(f, n, "obs");
    EXPECT_REFUSED(f, n, "gossip ACK: missing key \"obs\"");
    n = base(f, GOSSIP_MSG_PING), n = drop(f, n, "mesh");
    EXPECT_REFUSED(f, n, "gossip PING: missing key \"mesh\"");
    n = base(f, GOSSIP_MSG_PING);
    {
        size_t len = 0;
        uint8_t *p = pack_fields(f, n, NULL, 0, &len);
        /* The key "v" becomes the integer 1 (so the type is not known yet). */
        p[1] = 0x01;
        p[2] = 0x01;
        CHECK(decode_exact(p, len, &m, err, sizeof err) != 0 &&
                  strstr(err, "gossip message: map keys must be strings, got an integer"),
              "integer key: %s", err);
        free(p);
    }

    /* Trailing bytes. */
    n = base(f, GOSSIP_MSG_PING);
    expect_refused(f, n, "\xc0", 1, "gossip PING: 1 trailing byte after the map", __LINE__);
    expect_refused(f, n, "\x01\x02", 2, "gossip PING: 2 trailing bytes after the map", __LINE__);

    /* Updates: too many, each one strict. */
    static const uint8_t many_header[] = {0xdc, 0x02, 0x01}; /* array16 of 513 */
    n = base(f, GOSSIP_MSG_SYNC), n = add(f, n, RAW("up", many_header, 3));
    EXPECT_REFUSED(f, n, "gossip SYNC: field \"up\": 513 updates, at most 512");
    static const uint8_t short_header[] = {0xdc, 0x01, 0x00}; /* 256 updates, no bytes */
    n = base(f, GOSSIP_MSG_SYNC), n = add(f, n, RAW("up", short_header, 3));
    EXPECT_REFUSED(f, n, "gossip SYNC: field \"up\": the bytes end inside it");
    un = alive_fields(uf), un = add(uf, un, U("x", 1));
    n = base(f, GOSSIP_MSG_PING), n = add(f, n, up_of(uf, un));
    EXPECT_REFUSED(f, n, "gossip PING: field \"up[0]\": unknown key \"x\"");
    un = alive_fields(uf), un = add(uf, un, B("w", ups[1].wg_pub, GOSSIP_KEY_LEN));
    n = base(f, GOSSIP_MSG_PING), n = add(f, n, up_of(uf, un));
    EXPECT_REFUSED(f, n, "gossip PING: field \"up[0]\": key \"w\" is not allowed when \"s\" is ALIVE");
    un = suspect_fields(uf), un = drop(uf, un, "by");
    n = base(f, GOSSIP_MSG_PING), n = add(f, n, up_of(uf, un));
    EXPECT_REFUSED(f, n, "gossip PING: field \"up[0]\": missing key \"by\" (\"s\" is SUSPECT)");
    un = suspect_fields(uf), un = drop(uf, un, "s");
    n = base(f, GOSSIP_MSG_PING), n = add(f, n, up_of(uf, un));
    EXPECT_REFUSED(f, n, "gossip PING: field \"up[0]\": missing key \"s\"");
    un = suspect_fields(uf), un = add(uf, un, U("s", 1));
    n = base(f, GOSSIP_MSG_PING), n = add(f, n, up_of(uf, un));
    EXPECT_REFUSED(f, n, "gossip PING: field \"up[0]\": duplicate key \"s\"");
    un = suspect_fields(uf), un = set(uf, un, U("s", 4));
    n = base(f, GOSSIP_MSG_PING), n = add(f, n, up_of(uf, un));
    EXPECT_REFUSED(f, n, "gossip PING: field \"up[0].s\": is 4, expected 0 to 3");
    un = suspect_fields(uf), un = set(uf, un, S("by", "x y"));
    n = base(f, GOSSIP_MSG_ACK), n = add(f, n, up_of(uf, un));
    EXPECT_REFUSED(f, n, "gossip ACK: field \"up[0].by\": \"x y\" is not a node name");
    un = suspect_fields(uf), un = set(uf, un, B("w", mesh_id, 16));
    n = base(f, GOSSIP_MSG_ACK), n = add(f, n, up_of(uf, un));
    EXPECT_REFUSED(f, n, "gossip ACK: field \"up[0].w\": is a bin of 16 bytes, expected 32");
    un = alive_fields(uf), un = set(uf, un, B("r", mesh_id, 0));
    n = base(f, GOSSIP_MSG_PING), n = add(f, n, up_of(uf, un));
    EXPECT_REFUSED(f, n, "gossip PING: field \"up[0].r\": is a bin of 0 bytes, expected 1 to 12288");
    static uint8_t big[GOSSIP_RECORD_MAX + 1];
    un = alive_fields(uf), un = set(uf, un, B("r", big, sizeof big));
    n = base(f, GOSSIP_MSG_PING), n = add(f, n, up_of(uf, un));
    EXPECT_REFUSED(f, n, "gossip PING: field \"up[0].r\": is a bin of 12289 bytes, expected 1 to 12288");
    un = alive_fields(uf), un = set(uf, un, B("g", ups[0].rec.sig, 63));
    n = base(f, GOSSIP_MSG_PING), n = add(f, n, up_of(uf, un));
    EXPECT_REFUSED(f, n, "gossip PING: field \"up[0].g\": is a bin of 63 bytes, expected 64");
    static const uint8_t not_map[] = {0x91, 0x07};
    n = base(f, GOSSIP_MSG_PING), n = add(f, n, RAW("up", not_map, 2));
    EXPECT_REFUSED(f, n, "gossip PING: field \"up\": the bytes end inside it");

    /* JOIN: exactly one update, ALIVE. */
    n = base(f, GOSSIP_MSG_JOIN), n = drop(f, n, "up");
    EXPECT_REFUSED(f, n, "gossip JOIN: missing key \"up\"");
    static const uint8_t empty_array[] = {0x90};
    n = base(f, GOSSIP_MSG_JOIN), n = set(f, n, RAW("up", empty_array, 1));
    EXPECT_REFUSED(f, n, "gossip JOIN: field \"up\": a JOIN carries exactly one update (the "
                         "joiner's ALIVE record), got 0");
    n = base(f, GOSSIP_MSG_JOIN), n = set(f, n, up_of(uf, suspect_fields(uf)));
    EXPECT_REFUSED(f, n, "gossip JOIN: field \"up[0].s\": a JOIN's update must be ALIVE, got SUSPECT");
    {
        /* Two ALIVE updates. */
        un = alive_fields(uf);
        up_of(uf, un);
        static uint8_t two[2 * sizeof one_update];
        two[0] = 0x92;
        memcpy(two + 1, one_update + 1, one_update_len - 1);
        memcpy(two + one_update_len, one_update + 1, one_update_len - 1);
        n = base(f, GOSSIP_MSG_JOIN), n = set(f, n, RAW("up", two, 2 * one_update_len - 1));
        EXPECT_REFUSED(f, n, "gossip JOIN: field \"up\": a JOIN carries exactly one update (the "
                             "joiner's ALIVE record), got 2");
    }
}

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

static void test_record_refusals(void)
{
    field f[MAXF];
    size_t n = record_fields(f);
    EXPECT_RECORD(f, n, NULL);
    /* left as 0/1 integers too. */
    n = record_fields(f), n = set(f, n, U("left", 1));
    EXPECT_RECORD(f, n, NULL);
    n = record_fields(f), n = set(f, n, U("left", 2));
    EXPECT_RECORD(f, n, "record of node-0: field \"left\": expected a boolean or 0/1, got 2");
    n = record_fields(f), n = set(f, n, S("left", "no"));
    EXPECT_RECORD(f, n, "record of node-0: field \"left\": expected a boolean or 0/1, got a string");
    n = record_fields(f), n = drop(f, n, "dev"), n = add(f, n, U("zz", 1));
    EXPECT_RECORD(f, n, "record of node-0: unknown key \"zz\"");
    n = record_fields(f), n = drop(f, n, "dev");
    EXPECT_RECORD(f, n, "record of node-0: missing key \"dev\"");
    n = record_fields(f), n = add(f, n, U("zz", 1)), n = add(f, n, U("zy", 1));
    EXPECT_RECORD(f, n, "gossip record: map has 16 keys, a record has at most 15");
    n = record_fields(f), n = drop(f, n, "dev"), n = add(f, n, U("port", 1));
    EXPECT_RECORD(f, n, "record of node-0: duplicate key \"port\"");
    n = record_fields(f), n = set(f, n, U("port", 0));
    EXPECT_RECORD(f, n, "record of node-0: field \"port\": is 0, expected 1 to 65535");
    n = record_fields(f), n = set(f, n, S("addr", "10.77.3"));
    EXPECT_RECORD(f, n, "record of node-0: field \"addr\": \"10.77.3\" is not an IPv4 or IPv6 address");
    n = record_fields(f), n = set(f, n, S("name", "-/-"));
    EXPECT_RECORD(f, n, "gossip record: field \"name\": \"-/-\" is not a node name");
    n = record_fields(f), n = set(f, n, B("id", pub[0], 31));
    EXPECT_RECORD(f, n, "record of node-0: field \"id\": is a bin of 31 bytes, expected 32");
    n = record_fields(f), n = set(f, n, U("proto", (uint64_t)UINT32_MAX + 1));
    EXPECT_RECORD(f, n, "record of node-0: field \"proto\": is 4294967296");
    n = record_fields(f), n = set(f, n, U("t", (uint64_t)INT64_MAX + 1));
    EXPECT_RECORD(f, n, "record of node-0: field \"t\": is 9223372036854775808");
    n = record_fields(f), n = set(f, n, U("inc", UINT64_MAX)), n = set(f, n, I("t", INT64_MIN));
    EXPECT_RECORD(f, n, NULL);
    static const uint8_t five[] = {0x95, 0xa3, 'a', ':', '1', 0xa3, 'a', ':', '1', 0xa3,
                                   'a',  ':',  '1', 0xa3, 'a', ':', '1', 0xa3, 'a', ':', '1'};
    n = record_fields(f), n = set(f, n, RAW("ep", five, sizeof five));
    EXPECT_RECORD(f, n, "record of node-0: field \"ep\": 5 endpoints, at most 4");
    static const uint8_t bad_ep[] = {0x92, 0xa3, 'a', ':', '1', 0xa7, '1', '.', '2', '.', '3', '.', '4'};
    n = record_fields(f), n = set(f, n, RAW("ep", bad_ep, sizeof bad_ep));
    EXPECT_RECORD(f, n, "record of node-0: field \"ep[1]\": \"1.2.3.4\" is not an endpoint");
    static const uint8_t no_ep[] = {0x90};
    n = record_fields(f), n = set(f, n, RAW("ep", no_ep, 1));
    EXPECT_RECORD(f, n, NULL);
    static char longsw[GOSSIP_SOFTWARE_MAX + 1];
    memset(longsw, 's', GOSSIP_SOFTWARE_MAX);
    n = record_fields(f), n = set(f, n, S("sw", longsw));
    EXPECT_RECORD(f, n, "record of node-0: field \"sw\": is 32 bytes, at most 31");
    static char longdev[GOSSIP_DEVICES_MAX + 1];
    memset(longdev, 'd', GOSSIP_DEVICES_MAX);
    n = record_fields(f), n = set(f, n, S("dev", longdev));
    EXPECT_RECORD(f, n, "record of node-0: field \"dev\": is 1024 bytes, at most 1023");
    n = record_fields(f);
    expect_record(f, n, "\xc0", 1, "record of node-0: 1 trailing byte after the map", __LINE__);
}

/* ---------------------------------------------------- the encoder refuses */

static void expect_encode_refused(const gossip_msg *m, const char *want, int line)
{
    uint8_t buf[4096];
    size_t len = 77;
    char err[512] = "";
    int rc = gossip_encode(m, buf, sizeof buf, &len, err, sizeof err);
    CHECK(rc != 0 && strstr(err, want) && len == 0, "line %d: want '%s', got rc=%d '%s'", line,
          want, rc, err);
}

static void test_encoder_refusals(void)
{
    gossip_msg m = sample_msg(GOSSIP_MSG_PING);
    m.type = (gossip_msg_type)10;
    expect_encode_refused(&m, "gossip message: field \"t\": is 10, not a gossip message type (1 to 9)", __LINE__);
    m = sample_msg(GOSSIP_MSG_PING), m.from[0] = 0;
    expect_encode_refused(&m, "gossip PING: field \"from\": \"\" is not a node name", __LINE__);
    m = sample_msg(GOSSIP_MSG_PING), memset(m.from, 'a', sizeof m.from);
    expect_encode_refused(&m, "gossip PING: field \"from\": is longer than 63 bytes", __LINE__);
    m = sample_msg(GOSSIP_MSG_PING_REQ), strcpy(m.target, "fd5a::g");
    expect_encode_refused(&m, "gossip PING_REQ: field \"target\": \"fd5a::g\" is not an IPv4 or IPv6 address", __LINE__);
    m = sample_msg(GOSSIP_MSG_PING_REQ), m.target_port = 0;
    expect_encode_refused(&m, "gossip PING_REQ: field \"tport\": is 0, expected 1 to 65535", __LINE__);
    m = sample_msg(GOSSIP_MSG_PING_REQ), m.updates = ups, m.nupdates = 1;
    expect_encode_refused(&m, "gossip PING_REQ: field \"up\": a PING_REQ carries no updates, got 1", __LINE__);
    m = sample_msg(GOSSIP_MSG_ACK), strcpy(m.observed, "host");
    expect_encode_refused(&m, "gossip ACK: field \"obs\": \"host\" is not an endpoint", __LINE__);
    m = sample_msg(GOSSIP_MSG_SYNC), m.flags = 0x80000000u;
    expect_encode_refused(&m, "gossip SYNC: field \"fl\": has unknown bits 0x80000000", __LINE__);
    m = sample_msg(GOSSIP_MSG_JOIN_REPLY), m.ok = 2;
    expect_encode_refused(&m, "gossip JOIN_REPLY: field \"ok\": is 2, expected 0 or 1", __LINE__);
    m = sample_msg(GOSSIP_MSG_JOIN_REPLY), memset(m.reason, 'r', sizeof m.reason);
    expect_encode_refused(&m, "gossip JOIN_REPLY: field \"reason\": is longer than 255 bytes", __LINE__);
    m = sample_msg(GOSSIP_MSG_JOIN), m.nupdates = 0, m.updates = NULL;
    expect_encode_refused(&m, "gossip JOIN: field \"up\": a JOIN carries exactly one update", __LINE__);
    m = sample_msg(GOSSIP_MSG_JOIN), m.nupdates = 2;
    expect_encode_refused(&m, "gossip JOIN: field \"up\": a JOIN carries exactly one update (the joiner's ALIVE record), got 2", __LINE__);
    m = sample_msg(GOSSIP_MSG_JOIN), m.updates = ups + 3;
    expect_encode_refused(&m, "gossip JOIN: field \"up[0].s\": a JOIN's update must be ALIVE, got LEFT", __LINE__);
    m = sample_msg(GOSSIP_MSG_SYNC), m.nupdates = GOSSIP_MAX_UPDATES + 1;
    expect_encode_refused(&m, "gossip SYNC: field \"up\": 513 updates, expected 0 to 512", __LINE__);
    m = sample_msg(GOSSIP_MSG_SYNC), m.nupdates = -1;
    expect_encode_refused(&m, "gossip SYNC: field \"up\": -1 updates", __LINE__);
    m = sample_msg(GOSSIP_MSG_SYNC), m.updates = NULL;
    expect_encode_refused(&m, "gossip SYNC: field \"up\": is NULL with 4 updates", __LINE__);

    gossip_update u[2];
    u[0] = ups[0], u[1] = ups[1];
    m = sample_msg(GOSSIP_MSG_PING), m.updates = u;
    u[1].state = (gossip_state)4;
    expect_encode_refused(&m, "gossip PING: field \"up[1].s\": is 4, not a state", __LINE__);
    u[1] = ups[1], strcpy(u[1].from, "no way");
    expect_encode_refused(&m, "gossip PING: field \"up[1].by\": \"no way\" is not a node name", __LINE__);
    u[1] = ups[1], u[0].rec.len = 0;
    expect_encode_refused(&m, "gossip PING: field \"up[0].r\": record of 0 bytes, expected 1 to 12288", __LINE__);
    u[0].rec.len = GOSSIP_RECORD_MAX + 1;
    expect_encode_refused(&m, "gossip PING: field \"up[0].r\": record of 12289 bytes", __LINE__);
}

/* "does not fit": the caller then sends fewer updates. */
static void test_does_not_fit(void)
{
    gossip_msg m = sample_msg(GOSSIP_MSG_SYNC);
    size_t len = 0;
    uint8_t *full = encode_or_fail(&m, &len, __LINE__);
    if (!full)
        return;
    char err[256] = "", want[64];
    uint8_t *buf = malloc(len);
    size_t got = 0;
    CHECK(gossip_encode(&m, buf, len, &got, err, sizeof err) == 0 && got == len &&
              memcmp(buf, full, len) == 0,
          "exact fit: %s", err);
    for (size_t cap = 0; cap < len; cap += (cap < 64 ? 1 : 97)) {
        got = 77;
        snprintf(want, sizeof want, "does not fit in %zu bytes", cap);
        CHECK(gossip_encode(&m, cap ? buf : NULL, cap, &got, err, sizeof err) != 0 &&
                  strstr(err, want) && strstr(err, "gossip SYNC") && got == 0,
              "cap %zu: %s", cap, err);
    }
    snprintf(want, sizeof want, "(%zu bytes) does not fit in %zu bytes", len, len - 1);
    CHECK(gossip_encode(&m, buf, len - 1, &got, err, sizeof err) != 0 && strstr(err, want),
          "one byte short: %s", err);
    /* A SYNC of everything does not fit a datagram. */
    CHECK(gossip_encode(&m, buf, GOSSIP_UDP_MAX < len ? GOSSIP_UDP_MAX : len - 1, &got, err,
                        sizeof err) != 0 &&
              strstr(err, "does not fit in"),
          "datagram: %s", err);
    free(buf);
    free(full);
}


/* ------------------------------------------------------- the job text */

/* Whether the bytes contain the key "job" (fixstr 3). */
static int has_job_key(const gossip_signed *s)
{
    for (size_t i = 0; i + 4 <= s->len; i++)
        if (memcmp(s->bytes + i, "\xa3job", 4) == 0)
            return 1;
    return 0;
}

static void test_job_record(void)
{
    char err[256] = "";
    gossip_record r, back;
    gossip_signed s;

    /* No job: no "job" key, so the bytes are what they were before the key
     * existed, and the record opens with job "". */
    sample_record(&r, 0);
    sign_or_fail(&r, 0, &s, __LINE__);
    CHECK(!has_job_key(&s), "an empty job text is on the wire");
    CHECK(gossip_record_open(&s, &back, err, sizeof err) == 0 && back.job[0] == 0,
          "open without job: %s", err);

    /* An 8000-byte job text (JSON-ish, every printable byte): round trip,
     * the signature verifies, and one flipped byte inside it is refused. */
    sample_record(&r, 0);
    size_t jn = 8000;
    for (size_t i = 0; i < jn; i++)
        r.job[i] = (char)(0x20 + (i * 7) % 95);
    memcpy(r.job, "{\"job\":", 7);
    r.job[jn] = 0;
    sign_or_fail(&r, 0, &s, __LINE__);
    CHECK(has_job_key(&s) && s.len > jn && s.len <= GOSSIP_RECORD_MAX,
          "record with an 8000-byte job: %zu bytes", s.len);
    memset(&back, 0xee, sizeof back);
    CHECK(gossip_record_open(&s, &back, err, sizeof err) == 0 && same_record(&r, &back) &&
              strlen(back.job) == jn,
          "open a record with an 8000-byte job: %s", err);
    gossip_signed d = s;
    d.bytes[s.len / 2] ^= 0x01; /* inside the job text */
    CHECK(gossip_record_open(&d, &back, err, sizeof err) != 0 &&
              strstr(err, "record of node-0: signature does not verify"),
          "flipped job byte: %s", err);

    /* It travels in a SYNC (TCP), not in a datagram. */
    gossip_update u;
    memset(&u, 0, sizeof u);
    u.state = GOSSIP_ALIVE, u.rec = s;
    gossip_msg m = sample_msg(GOSSIP_MSG_UPDATE);
    m.updates = &u, m.nupdates = 1;
    uint8_t dgram[GOSSIP_UDP_MAX];
    size_t len = 0;
    CHECK(gossip_encode(&m, dgram, sizeof dgram, &len, err, sizeof err) != 0 &&
              strstr(err, "does not fit in 1200 bytes"),
          "a record with a job text fits a datagram: %s", err);
    m = sample_msg(GOSSIP_MSG_SYNC);
    m.updates = &u, m.nupdates = 1;
    round_trip(&m, __LINE__);

    /* The largest record the bounds allow, job text included, fits. */
    sample_record(&r, 1);
    memset(r.name, 'N', MESH_NAME_MAX - 1);
    r.name[MESH_NAME_MAX - 1] = 0;
    strcpy(r.address, "fd5a:1234:5678:9abc:def0:1234:5678:9abc");
    r.port = 65535, r.incarnation = UINT64_MAX, r.left = 1;
    r.nendpoints = GOSSIP_MAX_ENDPOINTS;
    for (int i = 0; i < GOSSIP_MAX_ENDPOINTS; i++) {
        memset(r.endpoints[i], 'h', MESH_WG_ENDPOINT_MAX - 7);
        strcpy(r.endpoints[i] + MESH_WG_ENDPOINT_MAX - 7, ":51820");
    }
    memset(r.software, 's', GOSSIP_SOFTWARE_MAX - 1);
    r.software[GOSSIP_SOFTWARE_MAX - 1] = 0;
    r.protocol = UINT32_MAX, r.mem_free = UINT64_MAX;
    memset(r.devices, 'd', GOSSIP_DEVICES_MAX - 1);
    r.devices[GOSSIP_DEVICES_MAX - 1] = 0;
    memset(r.job, 'j', GOSSIP_JOB_MAX - 1);
    r.job[GOSSIP_JOB_MAX - 1] = 0;
    r.signed_ms = INT64_MIN;
    sign_or_fail(&r, 1, &s, __LINE__);
    CHECK(s.len > 0 && s.len <= GOSSIP_RECORD_MAX, "the largest record takes %zu bytes", s.len);
    CHECK(gossip_record_open(&s, &back, err, sizeof err) == 0 && same_record(&r, &back),
          "open the largest record: %s", err);
    printf("largest record: %zu bytes (limit %d)\n", s.len, GOSSIP_RECORD_MAX);

    /* Too long: the encoder refuses (naming the key and the limit). */
    sample_record(&r, 0);
    memset(r.job, 'j', sizeof r.job);
    gossip_signed out;
    memset(&out, 0xee, sizeof out);
    CHECK(gossip_record_sign(&r, priv[0], &out, err, sizeof err) != 0 &&
              strstr(err, "record of node-0: field \"job\": is longer than 8191 bytes") &&
              is_zero(&out, sizeof out),
          "sign an over-long job: %s", err);

    /* ... and so does the decoder. */
    field f[MAXF];
    static char longjob[GOSSIP_JOB_MAX + 1];
    memset(longjob, 'j', GOSSIP_JOB_MAX);
    size_t n = record_fields(f);
    n = add(f, n, S("job", longjob));
    EXPECT_RECORD(f, n, "record of node-0: field \"job\": is 8192 bytes, at most 8191");
    longjob[GOSSIP_JOB_MAX - 1] = 0; /* 8191 bytes: the most */
    n = record_fields(f), n = add(f, n, S("job", longjob));
    EXPECT_RECORD(f, n, NULL);
    n = record_fields(f), n = add(f, n, S("job", "")); /* present but empty: "" */
    EXPECT_RECORD(f, n, NULL);
    n = record_fields(f), n = add(f, n, U("job", 1));
    EXPECT_RECORD(f, n, "record of node-0: field \"job\": expected a string, got an integer");
    n = record_fields(f), n = drop(f, n, "dev");
    n = add(f, n, S("job", "a")), n = add(f, n, S("job", "b"));
    EXPECT_RECORD(f, n, "record of node-0: duplicate key \"job\"");
    n = record_fields(f);
    n = add(f, n, ((field){.key = "job", .kind = F_STR, .p = "{\0}", .n = 3}));
    EXPECT_RECORD(f, n, "record of node-0: field \"job\": contains a NUL byte");
}

/* ---------------------------------------------------------------- FETCH */

static void test_fetch(void)
{
    char err[512] = "";
    field f[MAXF];
    size_t n;

    /* Round trips: the shortest and longest paths, extreme offsets. */
    gossip_msg m = sample_msg(GOSSIP_MSG_FETCH);
    strcpy(m.path, "a");
    round_trip(&m, __LINE__);
    memset(m.path, '~', GOSSIP_PATH_MAX - 1);
    m.path[0] = ' ';
    m.path[GOSSIP_PATH_MAX - 1] = 0;
    m.offset = UINT64_MAX;
    round_trip(&m, __LINE__);

    /* A whole chunk of 1 MiB, at an offset past 4 GiB. */
    uint8_t *big = malloc(GOSSIP_FETCH_CHUNK + 1);
    for (size_t i = 0; i <= GOSSIP_FETCH_CHUNK; i++)
        big[i] = (uint8_t)(i * 2654435761u >> 13);
    m = sample_msg(GOSSIP_MSG_FETCH_REPLY);
    m.data = big, m.data_len = GOSSIP_FETCH_CHUNK;
    m.offset = (uint64_t)5 << 32, m.total = m.offset + GOSSIP_FETCH_CHUNK;
    round_trip(&m, __LINE__);
    /* An empty one: the end of the file, and an empty file. */
    m.data = NULL, m.data_len = 0, m.offset = 77, m.total = 77;
    round_trip(&m, __LINE__);
    m.offset = 0, m.total = 0;
    round_trip(&m, __LINE__);
    m.data = chunk, m.data_len = 0; /* a pointer with no bytes is fine too */
    round_trip(&m, __LINE__);
    /* A refusal: a reason and nothing else. */
    m = sample_msg(GOSSIP_MSG_FETCH_REPLY);
    m.ok = 0, m.data = NULL, m.data_len = 0, m.offset = 0, m.total = 0;
    strcpy(m.reason, "jobs/run-1/plan.json: no such file");
    round_trip(&m, __LINE__);
    m.reason[0] = 0;
    round_trip(&m, __LINE__);

    /* The decoder: a 1 MiB chunk arrives whole, in its own block. */
    n = base(f, GOSSIP_MSG_FETCH_REPLY);
    n = set(f, n, B("data", big, GOSSIP_FETCH_CHUNK));
    n = set(f, n, U("off", 0)), n = set(f, n, U("total", GOSSIP_FETCH_CHUNK));
    gossip_msg got;
    int rc = decode_fields(f, n, &got, err, sizeof err);
    CHECK(rc == 0 && got.ok && got.data_len == GOSSIP_FETCH_CHUNK && got.total == GOSSIP_FETCH_CHUNK &&
              got.data && memcmp(got.data, big, GOSSIP_FETCH_CHUNK) == 0,
          "decode a 1 MiB chunk: %s", err);
    if (rc == 0)
        gossip_msg_free(&got);
    CHECK(got.data == NULL && got.data_len == 0, "gossip_msg_free leaves data");
    n = base(f, GOSSIP_MSG_FETCH), n = set(f, n, U64W("off", 3));
    rc = decode_fields(f, n, &got, err, sizeof err);
    CHECK(rc == 0 && got.offset == 3 && strcmp(got.path, "jobs/run-1/plan.json") == 0 &&
              !got.data && !got.nupdates,
          "FETCH: %s", err);

    /* Refusals: the path. */
    n = base(f, GOSSIP_MSG_FETCH), n = set(f, n, S("path", ""));
    EXPECT_REFUSED(f, n, "gossip FETCH: field \"path\": \"\" is not a path (1 to 255 bytes of printable ASCII)");
    static char longpath[GOSSIP_PATH_MAX + 1];
    memset(longpath, 'p', GOSSIP_PATH_MAX);
    n = base(f, GOSSIP_MSG_FETCH), n = set(f, n, S("path", longpath));
    EXPECT_REFUSED(f, n, "gossip FETCH: field \"path\": is 256 bytes, at most 255");
    n = base(f, GOSSIP_MSG_FETCH), n = set(f, n, S("path", "jobs/a\nb"));
    EXPECT_REFUSED(f, n, "gossip FETCH: field \"path\": \"jobs/a?b\" is not a path");
    n = base(f, GOSSIP_MSG_FETCH), n = set(f, n, S("path", "jobs/\x7f"));
    EXPECT_REFUSED(f, n, "gossip FETCH: field \"path\": \"jobs/?\" is not a path");
    n = base(f, GOSSIP_MSG_FETCH), n = set(f, n, S("path", "jobs/\xc3\xa9"));
    EXPECT_REFUSED(f, n, "is not a path");
    n = base(f, GOSSIP_MSG_FETCH), n = set(f, n, ((field){.key = "path", .kind = F_STR,
                                                          .p = "ab\0c", .n = 4}));
    EXPECT_REFUSED(f, n, "gossip FETCH: field \"path\": contains a NUL byte");
    n = base(f, GOSSIP_MSG_FETCH), n = set(f, n, B("path", "abc", 3));
    EXPECT_REFUSED(f, n, "gossip FETCH: field \"path\": expected a string, got a bin");
    n = base(f, GOSSIP_MSG_FETCH), n = drop(f, n, "path");
    EXPECT_REFUSED(f, n, "gossip FETCH: missing key \"path\"");
    n = base(f, GOSSIP_MSG_FETCH), n = drop(f, n, "off");
    EXPECT_REFUSED(f, n, "gossip FETCH: missing key \"off\"");
    n = base(f, GOSSIP_MSG_FETCH), n = set(f, n, I("off", -1));
    EXPECT_REFUSED(f, n, "gossip FETCH: field \"off\": expected an unsigned integer, got -1");
    n = base(f, GOSSIP_MSG_FETCH), n = add(f, n, B("data", chunk, 1));
    EXPECT_REFUSED(f, n, "gossip FETCH: key \"data\" is not allowed in FETCH");
    field uf[8];
    n = base(f, GOSSIP_MSG_FETCH), n = add(f, n, up_of(uf, suspect_fields(uf)));
    EXPECT_REFUSED(f, n, "gossip FETCH: key \"up\" is not allowed in FETCH");

    /* Refusals: the reply's data. */
    n = base(f, GOSSIP_MSG_FETCH_REPLY);
    n = set(f, n, B("data", big, GOSSIP_FETCH_CHUNK + 1));
    n = set(f, n, U("off", 0)), n = set(f, n, U("total", (uint64_t)GOSSIP_FETCH_CHUNK + 1));
    EXPECT_REFUSED(f, n, "gossip FETCH_REPLY: field \"data\": is a bin of 1048577 bytes, at most 1048576");
    n = base(f, GOSSIP_MSG_FETCH_REPLY), n = set(f, n, U("total", 10 + sizeof chunk - 1));
    EXPECT_REFUSED(f, n, "gossip FETCH_REPLY: field \"data\": 300 bytes at offset 10 end past the file's 309 bytes");
    n = base(f, GOSSIP_MSG_FETCH_REPLY), n = set(f, n, U("off", UINT64_MAX)),
    n = set(f, n, U("total", UINT64_MAX));
    EXPECT_REFUSED(f, n, "end past the file's");
    n = base(f, GOSSIP_MSG_FETCH_REPLY), n = set(f, n, U("total", 5));
    EXPECT_REFUSED(f, n, "300 bytes at offset 10 end past the file's 5 bytes");
    n = base(f, GOSSIP_MSG_FETCH_REPLY), n = set(f, n, S("data", "abc"));
    EXPECT_REFUSED(f, n, "gossip FETCH_REPLY: field \"data\": expected a bin, got a string");
    n = base(f, GOSSIP_MSG_FETCH_REPLY), n = drop(f, n, "total");
    EXPECT_REFUSED(f, n, "gossip FETCH_REPLY: missing key \"total\" when \"ok\" is true");
    n = base(f, GOSSIP_MSG_FETCH_REPLY), n = drop(f, n, "data");
    EXPECT_REFUSED(f, n, "gossip FETCH_REPLY: missing key \"data\" when \"ok\" is true");
    n = base(f, GOSSIP_MSG_FETCH_REPLY), n = drop(f, n, "ok");
    EXPECT_REFUSED(f, n, "gossip FETCH_REPLY: missing key \"ok\"");
    n = base(f, GOSSIP_MSG_FETCH_REPLY), n = add(f, n, S("reason", ""));
    EXPECT_REFUSED(f, n, "gossip FETCH_REPLY: key \"reason\" is not allowed in FETCH_REPLY when \"ok\" is true");
    n = base(f, GOSSIP_MSG_FETCH_REPLY), n = set(f, n, BOOL("ok", 0)), n = add(f, n, S("reason", "x"));
    EXPECT_REFUSED(f, n, "gossip FETCH_REPLY: key \"off\" is not allowed in FETCH_REPLY when \"ok\" is false");
    n = base(f, GOSSIP_MSG_FETCH_REPLY), n = set(f, n, BOOL("ok", 0)), n = drop(f, n, "off"),
    n = drop(f, n, "total"), n = add(f, n, S("reason", "x"));
    EXPECT_REFUSED(f, n, "gossip FETCH_REPLY: key \"data\" is not allowed in FETCH_REPLY when \"ok\" is false");
    n = base(f, GOSSIP_MSG_FETCH_REPLY), n = set(f, n, BOOL("ok", 0)), n = drop(f, n, "off"),
    n = drop(f, n, "total"), n = drop(f, n, "data");
    EXPECT_REFUSED(f, n, "gossip FETCH_REPLY: missing key \"reason\" when \"ok\" is false");
    n = add(f, n, S("reason", "no"));
    rc = decode_fields(f, n, &got, err, sizeof err);
    CHECK(rc == 0 && !got.ok && strcmp(got.reason, "no") == 0 && !got.data, "refusal: %s", err);
    n = base(f, GOSSIP_MSG_FETCH_REPLY), n = add(f, n, S("path", "a"));
    EXPECT_REFUSED(f, n, "gossip FETCH_REPLY: key \"path\" is not allowed in FETCH_REPLY");
    /* A refusal after the data was read frees it (ASan: no leak). */
    n = base(f, GOSSIP_MSG_FETCH_REPLY), n = add(f, n, U("zz", 1));
    EXPECT_REFUSED(f, n, "gossip FETCH_REPLY: unknown key \"zz\"");

    /* The encoder refuses what the decoder would. */
    m = sample_msg(GOSSIP_MSG_FETCH), m.path[0] = 0;
    expect_encode_refused(&m, "gossip FETCH: field \"path\": \"\" is not a path", __LINE__);
    m = sample_msg(GOSSIP_MSG_FETCH), strcpy(m.path, "a\tb");
    expect_encode_refused(&m, "gossip FETCH: field \"path\": \"a?b\" is not a path", __LINE__);
    m = sample_msg(GOSSIP_MSG_FETCH), memset(m.path, 'p', sizeof m.path);
    expect_encode_refused(&m, "gossip FETCH: field \"path\": is longer than 255 bytes", __LINE__);
    m = sample_msg(GOSSIP_MSG_FETCH), m.updates = ups, m.nupdates = 1;
    expect_encode_refused(&m, "gossip FETCH: field \"up\": a FETCH carries no updates, got 1", __LINE__);
    m = sample_msg(GOSSIP_MSG_FETCH_REPLY), m.data = big, m.data_len = GOSSIP_FETCH_CHUNK + 1;
    m.offset = 0, m.total = UINT64_MAX;
    expect_encode_refused(&m, "gossip FETCH_REPLY: field \"data\": 1048577 bytes, at most 1048576", __LINE__);
    m = sample_msg(GOSSIP_MSG_FETCH_REPLY), m.data = NULL;
    expect_encode_refused(&m, "gossip FETCH_REPLY: field \"data\": is NULL with 300 bytes", __LINE__);
    m = sample_msg(GOSSIP_MSG_FETCH_REPLY), m.total = m.offset + m.data_len - 1;
    expect_encode_refused(&m, "gossip FETCH_REPLY: field \"data\": 300 bytes at offset 1000 end past the file's 1299 bytes", __LINE__);
    m = sample_msg(GOSSIP_MSG_FETCH_REPLY), m.offset = UINT64_MAX, m.total = UINT64_MAX;
    expect_encode_refused(&m, "end past the file's", __LINE__);
    m = sample_msg(GOSSIP_MSG_FETCH_REPLY), strcpy(m.reason, "why");
    expect_encode_refused(&m, "gossip FETCH_REPLY: field \"reason\": a FETCH_REPLY that is ok carries no reason", __LINE__);
    m = sample_msg(GOSSIP_MSG_FETCH_REPLY), m.ok = 0;
    expect_encode_refused(&m, "gossip FETCH_REPLY: field \"data\": a FETCH_REPLY that refuses carries no data", __LINE__);
    m = sample_msg(GOSSIP_MSG_FETCH_REPLY), m.ok = 2;
    expect_encode_refused(&m, "gossip FETCH_REPLY: field \"ok\": is 2, expected 0 or 1", __LINE__);

    /* Every truncation of a 1 MiB reply is refused (every byte of the head
     * and the tail, a stride through the data), reading only the bytes
     * given (decode_exact: ASan sees a read past them). */
    m = sample_msg(GOSSIP_MSG_FETCH_REPLY);
    m.data = big, m.data_len = GOSSIP_FETCH_CHUNK, m.offset = 1, m.total = 1 + GOSSIP_FETCH_CHUNK;
    size_t len = 0;
    uint8_t *buf = encode_or_fail(&m, &len, __LINE__);
    if (buf) {
        int cuts = 0;
        for (size_t cut = 0; cut < len;
             cut = cut < 256 || cut >= len - 256 ? cut + 1
                   : cut + 4099 < len - 256   ? cut + 4099
                                              : len - 256) {
            memset(&got, 0xee, sizeof got);
            rc = decode_exact(buf, cut, &got, err, sizeof err);
            CHECK(rc != 0 && (strstr(err, "end inside") || strstr(err, "empty message")) &&
                      is_zero(&got, sizeof got),
                  "1 MiB FETCH_REPLY cut at %zu of %zu: rc=%d '%s'", cut, len, rc, err);
            if (rc == 0)
                gossip_msg_free(&got);
            cuts++;
        }
        CHECK(cuts > 700, "only %d cuts", cuts);
        free(buf);
    }
    free(big);
}

/* -------------------------------------------------- truncation and noise */

static void test_truncation(void)
{
    for (int t = GOSSIP_MSG_PING; t <= LAST_TYPE; t++) {
        gossip_msg m = sample_msg((gossip_msg_type)t);
        size_t len = 0;
        uint8_t *buf = encode_or_fail(&m, &len, __LINE__);
        if (!buf)
            continue;
        for (size_t cut = 0; cut < len; cut++) {
            gossip_msg back;
            memset(&back, 0xee, sizeof back);
            char err[256] = "";
            int rc = decode_exact(buf, cut, &back, err, sizeof err);
            CHECK(rc != 0 && (strstr(err, "end inside") || strstr(err, "empty message")) &&
                      is_zero(&back, sizeof back),
                  "%s cut at %zu of %zu: rc=%d '%s'", type_names[t], cut, len, rc, err);
            if (rc == 0)
                gossip_msg_free(&back);
        }
        free(buf);
    }
    /* Records too. */
    gossip_signed s = ups[0].rec;
    for (size_t cut = 0; cut < ups[0].rec.len; cut++) {
        gossip_record r;
        char err[256] = "";
        s.len = cut;
        CHECK(gossip_record_open(&s, &r, err, sizeof err) != 0 && err[0] &&
                  is_zero(&r, sizeof r),
              "record cut at %zu accepted", cut);
    }
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
    /* xorshift64*: deterministic, so a failure reproduces. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

/* Random damage never crashes the decoder, and whatever it still accepts
 * re-encodes and decodes to the same message. */
static void test_random_damage(void)
{
    int accepted = 0, tried = 0;
    for (int t = GOSSIP_MSG_PING; t <= LAST_TYPE; t++) {
        gossip_msg m = sample_msg((gossip_msg_type)t);
        size_t len = 0;
        uint8_t *buf = encode_or_fail(&m, &len, __LINE__);
        if (!buf)
            continue;
        uint8_t *p = malloc(len);
        uint8_t *again = malloc(GOSSIP_TCP_MAX);
        for (int iter = 0; iter < 100; iter++) {
            memcpy(p, buf, len);
            int flips = 1 + (int)(rng() % 4);
            for (int k = 0; k < flips; k++) {
                size_t at = (size_t)(rng() % len);
                if (rng() % 4 == 0)
                    p[at] = (uint8_t)rng();
                else
                    p[at] ^= (uint8_t)(1u << (rng() % 8));
            }
            size_t use = rng() % 8 == 0 ? (size_t)(rng() % (len + 1)) : len;
            gossip_msg back;
            char err[256] = "";
            tried++;
            if (decode_exact(p, use, &back, err, sizeof err) != 0) {
                CHECK(err[0] != 0 && is_zero(&back, sizeof back), "refused without a message");
                continue;
            }
            accepted++;
            size_t again_len = 0;
            gossip_msg back2;
            if (gossip_encode(&back, again, GOSSIP_TCP_MAX, &again_len, err, sizeof err) != 0) {
                CHECK(0, "%s: accepted message the encoder refuses: %s", type_names[t], err);
            } else if (decode_exact(again, again_len, &back2, err, sizeof err) != 0) {
                CHECK(0, "%s: re-encoded message refused: %s", type_names[t], err);
            } else {
                CHECK(same_msg(&back, &back2), "%s: changed in a round trip", type_names[t]);
                gossip_msg_free(&back2);
            }
            for (int i = 0; i < back.nupdates; i++)
                if (back.updates[i].state == GOSSIP_ALIVE || back.updates[i].state == GOSSIP_LEFT) {
                    gossip_record r;
                    (void)gossip_record_open(&back.updates[i].rec, &r, err, sizeof err);
                }
            gossip_msg_free(&back);
        }
        free(again);
        free(p);
        free(buf);
    }
    CHECK(accepted > 0 && accepted < tried, "%d of %d accepted", accepted, tried);
    printf("random damage: %d of %d accepted\n", accepted, tried);
}

/* Issue 12: the admission beside a record ("a") and the MACs. */
static void test_admission_and_mac(void)
{
    char err[256] = "";
    gossip_record r, r2;
    gossip_update u[2];
    memset(u, 0, sizeof u);
    sample_record(&r, 0);
    u[0].state = GOSSIP_ALIVE;
    sign_or_fail(&r, 0, &u[0].rec, __LINE__);
    CHECK(gossip_admission_sign(&r, priv[1], 1760000000123, &u[0].rec.adm, err, sizeof err) == 0,
          "admission: %s", err);
    CHECK(memcmp(u[0].rec.adm.by, pub[1], KEYS_LEN) == 0, "admission: \"by\" is not the signer");
    CHECK(gossip_admission_verify(&r, &u[0].rec.adm) == 1, "admission does not verify");
    /* Bound to name, keys, mesh and time. */
    r2 = r;
    strcpy(r2.name, "other");
    CHECK(gossip_admission_verify(&r2, &u[0].rec.adm) == 0, "admission verifies for another name");
    r2 = r;
    r2.wg_pub[5] ^= 1;
    CHECK(gossip_admission_verify(&r2, &u[0].rec.adm) == 0, "admission verifies for another key");
    r2 = r;
    r2.mesh_id[0] ^= 1;
    CHECK(gossip_admission_verify(&r2, &u[0].rec.adm) == 0, "admission verifies in another mesh");
    gossip_admission t = u[0].rec.adm;
    t.at_ms++;
    CHECK(gossip_admission_verify(&r, &t) == 0, "admission verifies at another time");
    /* Other fields of the record may change: the admission stays valid. */
    r2 = r;
    r2.incarnation += 7;
    strcpy(r2.devices, "");
    CHECK(gossip_admission_verify(&r2, &u[0].rec.adm) == 1, "admission lost with the incarnation");
    /* The founder: self-admitted, and the mesh id derives from its identity. */
    CHECK(gossip_admission_founder(&r, &u[0].rec.adm) == 0, "a member's admission is a founder's");
    gossip_admission self;
    CHECK(gossip_admission_sign(&r, priv[0], 5, &self, err, sizeof err) == 0, "admission: %s", err);
    CHECK(gossip_admission_founder(&r, &self) == 0,
          "self-admitted with a mesh id not derived from the identity counts as the founder");
    r2 = r;
    CHECK(keys_mesh_id(pub[0], r2.mesh_id, err, sizeof err) == 0, "mesh id: %s", err);
    CHECK(gossip_admission_sign(&r2, priv[0], 5, &self, err, sizeof err) == 0, "admission: %s", err);
    CHECK(gossip_admission_founder(&r2, &self) == 1, "the founder's self-admission is refused");
    /* On the wire: "a" rides with ALIVE and LEFT, round trip exact. */
    u[1] = ups[1];
    gossip_msg m = sample_msg(GOSSIP_MSG_SYNC);
    m.updates = u;
    m.nupdates = 2;
    size_t len = 0;
    uint8_t *buf = encode_or_fail(&m, &len, __LINE__);
    gossip_msg back;
    if (buf) {
        CHECK(decode_exact(buf, len, &back, err, sizeof err) == 0, "decode: %s", err);
        CHECK(back.nupdates == 2 && same_update(&back.updates[0], &u[0]) &&
                  same_update(&back.updates[1], &u[1]),
              "the admission does not survive the round trip");
        gossip_msg_free(&back);
        free(buf);
    }
    /* MACs: both sides of a pair of WireGuard keys compute one key; a third
     * key, a flipped byte, a missing byte fail. */
    uint8_t wa[KEYS_LEN], wb[KEYS_LEN], wc[KEYS_LEN], pa[KEYS_LEN], pb[KEYS_LEN], pc[KEYS_LEN];
    for (int i = 0; i < KEYS_LEN; i++)
        wa[i] = (uint8_t)(i + 1), wb[i] = (uint8_t)(3 * i + 2), wc[i] = (uint8_t)(5 * i + 9);
    uint8_t kab[32], kba[32], kac[32], kcb[32];
    CHECK(keys_x25519_public(wa, pa, err, sizeof err) == 0 &&
              keys_x25519_public(wb, pb, err, sizeof err) == 0 &&
              keys_x25519_public(wc, pc, err, sizeof err) == 0,
          "x25519: %s", err);
    CHECK(gossip_mac_key(wa, pb, kab, err, sizeof err) == 0 &&
              gossip_mac_key(wb, pa, kba, err, sizeof err) == 0 &&
              gossip_mac_key(wa, pc, kac, err, sizeof err) == 0 &&
              gossip_mac_key(wc, pb, kcb, err, sizeof err) == 0,
          "mac key: %s", err);
    CHECK(memcmp(kab, kba, 32) == 0, "the two sides of a pair compute different MAC keys");
    CHECK(memcmp(kab, kac, 32) != 0 && memcmp(kab, kcb, 32) != 0,
          "another pair computes the same MAC key");
    uint8_t msg[64 + GOSSIP_MAC_LEN];
    memcpy(msg, chunk, 64);
    gossip_mac(kab, msg, 64, msg + 64);
    CHECK(gossip_mac_check(kba, msg, sizeof msg) == 1, "a MAC does not verify");
    CHECK(gossip_mac_check(kcb, msg, sizeof msg) == 0, "a MAC verifies under another pair's key");
    msg[10] ^= 0x20;
    CHECK(gossip_mac_check(kab, msg, sizeof msg) == 0, "a MAC verifies over a changed byte");
    msg[10] ^= 0x20;
    CHECK(gossip_mac_check(kab, msg, sizeof msg - 1) == 0, "a cut MAC verifies");
    CHECK(gossip_mac_check(kab, msg, GOSSIP_MAC_LEN - 1) == 0, "a message shorter than a MAC");
    /* A low-order peer key gives no key at all. */
    uint8_t zero[KEYS_LEN] = {0};
    CHECK(gossip_mac_key(wa, zero, kab, err, sizeof err) != 0, "a MAC key with an all-zero "
          "peer key");
}

int main(void)
{
    init_keys();
    init_updates();
    for (size_t i = 0; i < sizeof chunk; i++)
        chunk[i] = (uint8_t)(i * 131 + 7);
    test_round_trip_every_type();
    test_doc_example();
    test_records();
    test_hand_made_accepted();
    test_refusals();
    test_record_refusals();
    test_encoder_refusals();
    test_does_not_fit();
    test_job_record();
    test_fetch();
    test_truncation();
    test_random_damage();
    test_admission_and_mac();
    if (failures) {
        fprintf(stderr, "test_gossip_wire: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_gossip_wire: ok\n");
    return 0;
}

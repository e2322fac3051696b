/* test_gossip_wire_refusals.c — the gossip codec (mesh/gossip_msgpack.c,
 * gossip_record.c) on what it must refuse: hand-made messages accepted and
 * then damaged field by field (each refusal names the field), records with
 * bad fields, messages the encoder will not write or that do not fit,
 * every truncation, and seeded random damage. Fixtures: gossip_wire_fixture.h. */
#include "gossip_wire_fixture.h"

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
    n = set(f, n, U64W("v", 2));
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
    n = base(f, GOSSIP_MSG_PING), n = set(f, n, U("v", 1)), n = add(f, n, U("zz", 1));
    EXPECT_REFUSED(f, n, "gossip: protocol version 1, this node speaks 2");
    n = base(f, GOSSIP_MSG_PING), n = drop(f, n, "v");
    EXPECT_REFUSED(f, n, "gossip PING: missing key \"v\"");
    n = base(f, GOSSIP_MSG_PING), n = drop(f, n, "t");
    EXPECT_REFUSED(f, n, "gossip message: missing key \"t\"");
    n = base(f, GOSSIP_MSG_PING), n = set(f, n, U("t", 12));
    EXPECT_REFUSED(f, n, "gossip message: field \"t\": is 12, not a gossip message type (1 to 11)");
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
    EXPECT_RECORD(f, n, "record of node-0: unknown key \"zz\"");
    n = record_fields(f), n = add(f, n, U("zz", 1)), n = add(f, n, U("zy", 1));
    n = add(f, n, U("zx", 1));
    EXPECT_RECORD(f, n, "gossip record: map has 17 keys, a record has at most 16");
    /* "nat" is written only when true: false has no place (one encoding). */
    n = record_fields(f), n = add(f, n, BOOL("nat", 0));
    EXPECT_RECORD(f, n, "record of node-0: field \"nat\": is false: the key is written only "
                        "when true");
    n = record_fields(f), n = add(f, n, BOOL("nat", 1));
    expect_record(f, n, NULL, 0, NULL, __LINE__);
    /* PUNCH: keys of their exact lengths, all four required, nothing else. */
    {
        static const uint8_t k31[31] = {1}, m15[15] = {3};
        n = base(f, GOSSIP_MSG_PUNCH), n = set(f, n, B("pa", k31, sizeof k31));
        EXPECT_REFUSED(f, n, "gossip PUNCH: field \"pa\"");
        n = base(f, GOSSIP_MSG_PUNCH), n = set(f, n, B("pm", m15, sizeof m15));
        EXPECT_REFUSED(f, n, "gossip PUNCH: field \"pm\"");
        n = base(f, GOSSIP_MSG_PUNCH), n = drop(f, n, "pn");
        EXPECT_REFUSED(f, n, "gossip PUNCH: missing key \"pn\"");
        n = base(f, GOSSIP_MSG_PUNCH), n = add(f, n, U("seq", 1));
        EXPECT_REFUSED(f, n, "gossip PUNCH: key \"seq\" is not allowed in PUNCH");
        n = base(f, GOSSIP_MSG_PING), n = add(f, n, U("pn", 1));
        EXPECT_REFUSED(f, n, "gossip PING: key \"pn\" is not allowed in PING");
        /* RELAY (docs/PROTOCOL.md, "Relays"). */
        n = base(f, GOSSIP_MSG_RELAY), n = drop(f, n, "rv");
        EXPECT_REFUSED(f, n, "gossip RELAY: missing key \"rv\"");
        n = base(f, GOSSIP_MSG_RELAY), n = set(f, n, B("rv", k31, sizeof k31));
        EXPECT_REFUSED(f, n, "gossip RELAY: field \"rv\"");
        n = base(f, GOSSIP_MSG_RELAY), n = set(f, n, U("rp", 1ull << 32));
        EXPECT_REFUSED(f, n, "gossip RELAY: field \"rp\"");
        n = base(f, GOSSIP_MSG_PUNCH), n = add(f, n, U("rp", 1));
        EXPECT_REFUSED(f, n, "gossip PUNCH: key \"rp\" is not allowed in PUNCH");
    }
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


static void test_encoder_refusals(void)
{
    gossip_msg m = sample_msg(GOSSIP_MSG_PING);
    m.type = (gossip_msg_type)12;
    expect_encode_refused(&m, "gossip message: field \"t\": is 12, not a gossip message type (1 to 11)", __LINE__);
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

int main(void)
{
    init_keys();
    init_updates();
    for (size_t i = 0; i < sizeof chunk; i++)
        chunk[i] = (uint8_t)(i * 131 + 7);
    test_hand_made_accepted();
    test_refusals();
    test_record_refusals();
    test_encoder_refusals();
    test_does_not_fit();
    test_truncation();
    test_random_damage();
    if (failures) {
        fprintf(stderr, "test_gossip_wire_refusals: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_gossip_wire_refusals: ok\n");
    return 0;
}

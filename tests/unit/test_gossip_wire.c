/* test_gossip_wire.c — the gossip codec (mesh/gossip_msgpack.c,
 * gossip_record.c) on what it must accept: every message type round-trips
 * exactly, the documented example decodes, signed records and admissions
 * verify and refuse tampering, job records and FETCH messages keep their
 * bytes, and datagrams are MACed per pair. The refusals of damaged input are
 * in test_gossip_wire_refusals.c; the fixtures in gossip_wire_fixture.h. */
#include "gossip_wire_fixture.h"

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
        0x85, 0xa1, 0x76, 0x02, 0xa1, 0x74, 0x01, 0xa4, 0x6d, 0x65, 0x73, 0x68, 0xc4,
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
    r.nat = 1;
    sign_or_fail(&r, 1, &s, __LINE__);
    CHECK(s.len <= GOSSIP_RECORD_MAX, "the largest record takes %zu bytes", s.len);
    CHECK(gossip_record_open(&s, &back, err, sizeof err) == 0 && same_record(&r, &back),
          "open the largest record: %s", err);
    r.nendpoints = 0, r.devices[0] = 0, r.software[0] = 0, r.signed_ms = -1, r.left = 0;
    r.nat = 0;
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
    test_job_record();
    test_fetch();
    test_admission_and_mac();
    if (failures) {
        fprintf(stderr, "test_gossip_wire: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_gossip_wire: ok\n");
    return 0;
}

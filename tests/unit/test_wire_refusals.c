/* test_wire_refusals.c — the frame codec against other encoders and bad
 * frames: frames from msgpack-c in any key order and integer width are
 * understood; each malformed one is refused with a message naming the field;
 * the encoder refuses what a peer would refuse; length prefixes are bounded. */
#include "wire_fixture.h"

static void test_other_encoders(void)
{
    field f[MAXF];
    mesh_msg m;
    char err[512] = "";

    /* msgpack-c packing keys in another order, "data" first. */
    size_t n = base_activations(f);
    CHECK(decode_fields(f, n, &m, err, sizeof err) == 0, "%s", err);
    mesh_msg want = sample(MESH_MSG_ACTIVATIONS);
    msg_equal(&want, &m, __LINE__);

    /* Wider integers than needed, signed formats for unsigned fields, a
     * float32 value: all the same numbers. */
    n = base_norm(f);
    n = set(f, n, (field){.key = "run", .kind = F_U64W, .u = 9});
    n = set(f, n, (field){.key = "t", .kind = F_I8W, .i = MESH_MSG_NORM});
    n = set(f, n, (field){.key = "step", .kind = F_U64W, .u = 0});
    n = set(f, n, (field){.key = "val", .kind = F_F32, .f = 0.5});
    CHECK(decode_fields(f, n, &m, err, sizeof err) == 0 && m.run_id == 9 &&
              m.type == MESH_MSG_NORM && m.value == 0.5 && m.stage == 3 && m.flags == 1,
          "%s", err);

    /* map16, str8 and str16 keys and values, bin32, array16, uint64 shape:
     * formats msgpack-c never picks for these sizes but others may. */
    static const uint8_t raw[] = {
        0xde, 0x00, 0x05,                                    /* map16, 5 entries */
        0xd9, 0x01, 'v', 0xcf, 0, 0, 0, 0, 0, 0, 0, 2,        /* "v": uint64 2 */
        0xda, 0x00, 0x01, 't', 0xd3, 0, 0, 0, 0, 0, 0, 0, 7,  /* "t": int64 7 */
        0xa3, 'r', 'u', 'n', 0xce, 0, 0, 1, 0,               /* "run": uint32 256 */
        0xa4, 't', 'e', 'x', 't', 0xdb, 0, 0, 0, 2, 'o', 'k', /* "text": str32 "ok" */
        0xa3, 'r', 'u', 'n',                                 /* duplicate, see below */
    };
    CHECK(decode_exact(raw, sizeof raw - 4, &m, err, sizeof err) != 0 &&
              strstr(err, "payload ends inside"),
          "map16 with 5 entries but 4 present: %s", err);
    uint8_t four[sizeof raw - 4];
    memcpy(four, raw, sizeof four);
    four[2] = 4;
    CHECK(decode_exact(four, sizeof four, &m, err, sizeof err) == 0 &&
              m.type == MESH_MSG_ABORT && m.run_id == 256 && strcmp(m.text, "ok") == 0,
          "wide formats: %s", err);

    static const uint8_t raw_tensor[] = {
        0x8a,
        0xa1, 'v', 0x02,
        0xa1, 't', 0x05,
        0xa3, 'r', 'u', 'n', 0x00,
        0xa2, 'e', 'p', 0x00,
        0xa4, 's', 't', 'e', 'p', 0xd0, 0x05,                 /* int8 5 */
        0xa2, 's', 't', 0xd1, 0x00, 0x02,                     /* int16 2 */
        0xa2, 'd', 't', 0xcc, 0x02,                           /* uint8 2 */
        0xa5, 's', 'h', 'a', 'p', 'e', 0xdc, 0x00, 0x02, 0xcf, 0, 0, 0, 0, 0, 0, 0, 1,
        0x02,                                                 /* array16 [1, 2] */
        0xa4, 'd', 'a', 't', 'a', 0xc6, 0, 0, 0, 8, 1, 0, 0, 0, 2, 0, 0, 0, /* bin32 */
        0xa2, 'x', 'x', 0x00,                                 /* one key too many */
    };
    uint8_t nine[sizeof raw_tensor - 4];
    memcpy(nine, raw_tensor, sizeof nine);
    nine[0] = 0x89;
    CHECK(decode_exact(nine, sizeof nine, &m, err, sizeof err) == 0 &&
              m.type == MESH_MSG_TIED_GRAD && m.step == 5 && m.stage == 2 &&
              m.dtype == MESH_I32 && m.ndim == 2 && m.shape[0] == 1 && m.shape[1] == 2 &&
              m.nbytes == 8 && memcmp(m.data, "\1\0\0\0\2\0\0\0", 8) == 0,
          "wide formats with a tensor: %s", err);
    EXPECT_REFUSED_BYTES(raw_tensor, sizeof raw_tensor, "unknown key \"xx\"");
}

static void test_refusals(void)
{
    field f[MAXF];
    size_t n;

    /* version: named as such, before anything else is judged */
    n = base_activations(f), n = set(f, n, U("v", 3));
    EXPECT_REFUSED(f, n, "protocol version 3, this node speaks 2");
    n = set(f, n, U("t", 99)), n = set(f, n, U("future", 1));
    EXPECT_REFUSED(f, n, "protocol version 3, this node speaks 2");
    /* version 1 (before COMMIT carried flags) is refused by name too */
    n = base_hello(f), n = set(f, n, U("v", 1));
    EXPECT_REFUSED(f, n, "protocol version 1, this node speaks 2");
    n = base_hello(f), n = set(f, n, U("v", 0));
    EXPECT_REFUSED(f, n, "protocol version 0, this node speaks 2");
    n = base_hello(f), n = drop(f, n, "v");
    EXPECT_REFUSED(f, n, "missing key \"v\"");
    n = base_hello(f), n = set(f, n, S("v", "1"));
    EXPECT_REFUSED(f, n, "\"v\" must be an integer, got a string");

    /* type */
    n = base_hello(f), n = set(f, n, U("t", 9));
    EXPECT_REFUSED(f, n, "\"t\" is 9, not a message type");
    n = base_hello(f), n = set(f, n, U("t", 0));
    EXPECT_REFUSED(f, n, "\"t\" is 0, not a message type");
    n = base_hello(f), n = drop(f, n, "t");
    EXPECT_REFUSED(f, n, "missing key \"t\"");

    /* keys: unknown, duplicate, missing, not allowed for the type */
    n = base_hello(f), n = set(f, n, U("nmae", 1));
    EXPECT_REFUSED(f, n, "unknown key \"nmae\"");
    n = base_hello(f), n = set(f, n, (field){.key = "\x01\"zz", .kind = F_NIL});
    EXPECT_REFUSED(f, n, "unknown key \"??zz\"");
    n = base_hello(f);
    f[n++] = S("name", "node-b");
    EXPECT_REFUSED(f, n, "duplicate key \"name\"");
    n = base_activations(f), n = drop(f, n, "data");
    EXPECT_REFUSED(f, n, "ACTIVATIONS is missing key \"data\"");
    n = base_activations(f), n = drop(f, n, "lab");
    EXPECT_REFUSED(f, n, "ACTIVATIONS is missing key \"lab\"");
    /* kept = 0 would make the last stage divide the loss by zero */
    n = base_activations(f), n = set(f, n, I("kept", 0));
    EXPECT_REFUSED(f, n, "ACTIVATIONS: \"kept\" is 0");
    n = base_norm(f), n = drop(f, n, "fl");
    EXPECT_REFUSED(f, n, "NORM is missing key \"fl\"");
    n = base_gradients(f), n = set(f, n, B("lab", labels, 12));
    EXPECT_REFUSED(f, n, "key \"lab\" is not allowed in GRADIENTS");
    n = base_hello(f), n = set(f, n, I("step", 1));
    EXPECT_REFUSED(f, n, "key \"step\" is not allowed in HELLO");
    n = base_norm(f), n = set(f, n, I("kept", 1));
    EXPECT_REFUSED(f, n, "key \"kept\" is not allowed in NORM");

    /* wrong msgpack kinds, each naming the key */
    n = base_activations(f), n = set(f, n, S("step", "12"));
    EXPECT_REFUSED(f, n, "\"step\" must be an integer, got a string");
    n = base_activations(f), n = set(f, n, (field){.key = "run", .kind = F_F64, .f = 1});
    EXPECT_REFUSED(f, n, "\"run\" must be an integer, got a float");
    n = base_norm(f), n = set(f, n, I("val", 1));
    EXPECT_REFUSED(f, n, "\"val\" must be a float, got an integer");
    n = base_hello(f), n = set(f, n, B("name", "abc", 3));
    EXPECT_REFUSED(f, n, "\"name\" must be a string, got a bin");
    n = base_activations(f), n = set(f, n, S("data", "abc"));
    EXPECT_REFUSED(f, n, "\"data\" must be a bin, got a string");
    n = base_activations(f), n = set(f, n, (field){.key = "lab", .kind = F_NIL});
    EXPECT_REFUSED(f, n, "\"lab\" must be a bin, got nil");
    n = base_activations(f), n = set(f, n, (field){.key = "shape", .kind = F_MAP});
    EXPECT_REFUSED(f, n, "\"shape\" must be an array, got a map");
    n = base_activations(f), n = set(f, n, U("shape", 6));
    EXPECT_REFUSED(f, n, "\"shape\" must be an array, got an integer");
    static const uint8_t int_key[] = {0x81, 0x01, 0x01};
    EXPECT_REFUSED_BYTES(int_key, sizeof int_key, "map keys must be strings, got an integer");
    static const uint8_t array[] = {0x91, 0x01};
    EXPECT_REFUSED_BYTES(array, sizeof array, "payload must be a msgpack map, got an array");
    static const uint8_t c1[] = {0x81, 0xa1, 'v', 0xc1};
    EXPECT_REFUSED_BYTES(c1, sizeof c1, "\"v\" must be an integer, got the never-used byte 0xc1");
    static const uint8_t shape_float[] = {0x81, 0xa5, 's', 'h', 'a', 'p', 'e', 0x92, 0x01, 0xcb,
                                          0, 0, 0, 0, 0, 0, 0, 0};
    EXPECT_REFUSED_BYTES(shape_float, sizeof shape_float,
                         "\"shape[1]\" must be an integer, got a float");

    /* integer ranges */
    n = base_activations(f), n = set(f, n, I("step", -1));
    EXPECT_REFUSED(f, n, "\"step\" is negative (-1)");
    n = base_activations(f), n = set(f, n, U("step", (uint64_t)INT64_MAX + 1));
    EXPECT_REFUSED(f, n, "\"step\" is 9223372036854775808, at most 9223372036854775807");
    n = base_activations(f), n = set(f, n, U("ep", (uint64_t)UINT32_MAX + 1));
    EXPECT_REFUSED(f, n, "\"ep\" is 4294967296, at most 4294967295");
    n = base_activations(f), n = set(f, n, I("mb", -32));
    EXPECT_REFUSED(f, n, "\"mb\" is negative (-32)");
    n = base_activations(f), n = set(f, n, I("st", (int64_t)INT32_MAX + 1));
    EXPECT_REFUSED(f, n, "\"st\" is 2147483648, at most 2147483647");
    n = base_activations(f), n = set(f, n, I("kept", INT64_MIN));
    EXPECT_REFUSED(f, n, "\"kept\" is negative (-9223372036854775808)");
    n = base_norm(f), n = set(f, n, U("fl", (uint64_t)1 << 32));
    EXPECT_REFUSED(f, n, "\"fl\" is 4294967296, at most 4294967295");
    n = base_activations(f), n = set(f, n, U("dt", 3));
    EXPECT_REFUSED(f, n, "\"dt\" is 3, not a dtype");
    n = base_activations(f), n = set(f, n, U("dt", UINT64_MAX));
    EXPECT_REFUSED(f, n, "\"dt\" is 18446744073709551615, not a dtype");

    /* shapes and byte counts */
    n = base_activations(f);
    n = set(f, n, (field){.key = "shape", .kind = F_SHAPE, .ndim = 5, .dims = {1, 1, 2, 3, 1}});
    EXPECT_REFUSED(f, n, "\"shape\" has 5 dims, at most 4");
    n = set(f, n, (field){.key = "shape", .kind = F_SHAPE, .ndim = 2, .dims = {-3, -2}});
    EXPECT_REFUSED(f, n, "\"shape[0]\" is negative (-3)");
    n = set(f, n, (field){.key = "shape", .kind = F_SHAPE, .ndim = 2, .dims = {5, 6}});
    n = set(f, n, B("data", NULL, 100));
    EXPECT_REFUSED(f, n, "\"data\" has 100 bytes, shape [5, 6] f32 needs 120");
    n = set(f, n, (field){.key = "shape", .kind = F_SHAPE, .ndim = 0});
    EXPECT_REFUSED(f, n, "\"data\" has 100 bytes, shape [] f32 needs 4");
    /* a shape whose byte count wraps around 2^64 to exactly the bin's size */
    n = set(f, n, (field){.key = "shape", .kind = F_SHAPE, .ndim = 2,
                          .dims = {(int64_t)1 << 62, 1}});
    n = set(f, n, B("data", NULL, 0));
    EXPECT_REFUSED(f, n, "shape [4611686018427387904, 1] f32 needs more than");
    n = set(f, n, (field){.key = "shape", .kind = F_SHAPE, .ndim = 4,
                          .dims = {65536, 65536, 65536, 65536}});
    EXPECT_REFUSED(f, n, "needs more than");
    n = base_gradients(f), n = set(f, n, B("data", NULL, 13));
    EXPECT_REFUSED(f, n, "\"data\" has 13 bytes, shape [3, 1, 2] bf16 needs 12");
    n = base_activations(f), n = set(f, n, B("lab", labels, 7));
    EXPECT_REFUSED(f, n, "\"lab\" has 7 bytes, not a multiple of 4");

    /* strings */
    n = base_hello(f), n = set(f, n, (field){.key = "name", .kind = F_STR, .n = 64});
    EXPECT_REFUSED(f, n, "\"name\" is 64 bytes, at most 63");
    n = base_hello(f), n = set(f, n, (field){.key = "text", .kind = F_STR, .n = 256});
    EXPECT_REFUSED(f, n, "\"text\" is 256 bytes, at most 255");
    n = base_hello(f), n = set(f, n, (field){.key = "text", .kind = F_STR, .n = 65536});
    EXPECT_REFUSED(f, n, "\"text\" is 65536 bytes, at most 255");
    n = base_hello(f), n = set(f, n, (field){.key = "name", .kind = F_STR, .s = "a\0b", .n = 3});
    EXPECT_REFUSED(f, n, "\"name\" contains a NUL byte");
    n = base_hello(f), n = set(f, n, (field){.key = "name", .kind = F_STR, .n = 63});
    mesh_msg m;
    char err[256] = "";
    CHECK(decode_fields(f, n, &m, err, sizeof err) == 0 && strlen(m.name) == 63, "%s", err);

    /* the map itself */
    msgpack_sbuffer sb;
    n = base_norm(f);
    pack_fields(f, n, &sb);
    msgpack_sbuffer_write(&sb, "\xc0", 1);
    EXPECT_REFUSED_BYTES(sb.data, sb.size, "1 trailing byte after the map");
    msgpack_sbuffer_write(&sb, "\xc0\xc0", 2);
    EXPECT_REFUSED_BYTES(sb.data, sb.size, "3 trailing bytes after the map");
    msgpack_sbuffer_destroy(&sb);
    EXPECT_REFUSED_BYTES("", 0, "empty payload");
    CHECK(mesh_decode(NULL, 0, &m, err, sizeof err) != 0, "NULL payload accepted");
    static const uint8_t many[] = {0xde, 0x00, 0x11};
    EXPECT_REFUSED_BYTES(many, sizeof many, "map has 17 keys, no message has more than 16");
    static const uint8_t map32[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'v', 0x02};
    EXPECT_REFUSED_BYTES(map32, sizeof map32, "map has 4294967295 keys");
    static const uint8_t huge_bin[] = {0x81, 0xa4, 'd', 'a', 't', 'a', 0xc6, 0xff, 0xff, 0xff,
                                       0xff, 0x00};
    EXPECT_REFUSED_BYTES(huge_bin, sizeof huge_bin, "payload ends inside \"data\"");
    static const uint8_t huge_str[] = {0x81, 0xa4, 't', 'e', 'x', 't', 0xdb, 0xff, 0xff, 0xff,
                                       0xff, 'a'};
    EXPECT_REFUSED_BYTES(huge_str, sizeof huge_str, "\"text\" is 4294967295 bytes, at most 255");
    static const uint8_t huge_array[] = {0x81, 0xa5, 's', 'h', 'a', 'p', 'e', 0xdd, 0xff, 0xff,
                                         0xff, 0xff};
    EXPECT_REFUSED_BYTES(huge_array, sizeof huge_array, "\"shape\" has 4294967295 dims, at most 4");
    /* the version pre-scan walks nested values of every kind without
     * trusting their lengths */
    static const uint8_t nested[] = {0x82, 0xa1, 'x', 0x92, 0xd8, 0x01, 0, 0, 0, 0, 0, 0, 0,
                                     0, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff,
                                     0x91};
    EXPECT_REFUSED_BYTES(nested, sizeof nested, "unknown key \"x\"");

    /* the message buffer: cut short, NUL-terminated, or absent */
    n = base_hello(f), n = set(f, n, U("v", 3));
    char tiny[8];
    memset(tiny, 'z', sizeof tiny);
    CHECK(decode_fields(f, n, &m, tiny, sizeof tiny) != 0 && strcmp(tiny, "protoco") == 0,
          "'%.8s'", tiny);
    CHECK(decode_fields(f, n, &m, NULL, 0) != 0, "no error buffer");
}

static void test_encoder_refusals(void)
{
    uint8_t *head = (uint8_t *)"unchanged";
    size_t head_len = 99;
    char err[256] = "";
    mesh_msg m;

#define EXPECT_ENCODE_FAILS(needle)                                                          \
    do {                                                                                     \
        int rc_ = mesh_encode_head(&m, &head, &head_len, err, sizeof err);                   \
        CHECK(rc_ != 0 && strstr(err, needle) && head == NULL && head_len == 0,              \
              "rc=%d '%s', wanted '%s'", rc_, err, needle);                                  \
        if (rc_ == 0)                                                                        \
            free(head);                                                                      \
    } while (0)

    m = sample(MESH_MSG_ACTIVATIONS), m.type = (mesh_msg_type)9;
    EXPECT_ENCODE_FAILS("\"t\" is 9, not a message type");
    m = sample(MESH_MSG_ACTIVATIONS), m.type = (mesh_msg_type)0;
    EXPECT_ENCODE_FAILS("\"t\" is 0, not a message type");
    m = sample(MESH_MSG_ACTIVATIONS), m.nbytes = 20;
    EXPECT_ENCODE_FAILS("\"data\" has 20 bytes, shape [2, 3] f32 needs 24");
    m = sample(MESH_MSG_ACTIVATIONS), m.ndim = 5;
    EXPECT_ENCODE_FAILS("\"shape\" has 5 dims, at most 4");
    m = sample(MESH_MSG_ACTIVATIONS), m.ndim = -1;
    EXPECT_ENCODE_FAILS("\"shape\" has -1 dims");
    m = sample(MESH_MSG_ACTIVATIONS), m.shape[1] = -3;
    EXPECT_ENCODE_FAILS("\"shape[1]\" is negative (-3)");
    m = sample(MESH_MSG_GRADIENTS), m.dtype = (mesh_dtype)3;
    EXPECT_ENCODE_FAILS("\"dt\" is 3, not a dtype");
    m = sample(MESH_MSG_TIED_GRAD), m.data = NULL;
    EXPECT_ENCODE_FAILS("\"data\" is NULL with 12 bytes");
    m = sample(MESH_MSG_ACTIVATIONS), m.labels = NULL;
    EXPECT_ENCODE_FAILS("\"lab\" is NULL with 3 labels");
    m = sample(MESH_MSG_ACTIVATIONS), m.step = -1;
    EXPECT_ENCODE_FAILS("\"step\" is negative (-1)");
    m = sample(MESH_MSG_GRADIENTS), m.micro = -2;
    EXPECT_ENCODE_FAILS("\"mb\" is negative (-2)");
    m = sample(MESH_MSG_COMMIT), m.stage = -1;
    EXPECT_ENCODE_FAILS("\"st\" is negative (-1)");
    m = sample(MESH_MSG_ACTIVATIONS), m.kept = -5;
    EXPECT_ENCODE_FAILS("\"kept\" is negative (-5)");
    /* The last stage divides the loss by it (issue 12, finding 9). */
    m = sample(MESH_MSG_ACTIVATIONS), m.kept = 0;
    EXPECT_ENCODE_FAILS("ACTIVATIONS: \"kept\" is 0");
    m = sample(MESH_MSG_HELLO), memset(m.name, 'x', sizeof m.name);
    EXPECT_ENCODE_FAILS("\"name\" is longer than 63 bytes");
    m = sample(MESH_MSG_ABORT), memset(m.text, 'x', sizeof m.text);
    EXPECT_ENCODE_FAILS("\"text\" is longer than 255 bytes");
    /* A tensor over 4 GiB cannot be described by a 32-bit length prefix. */
    m = sample(MESH_MSG_GRADIENTS), m.dtype = MESH_F32, m.ndim = 1,
    m.shape[0] = (int64_t)1 << 30, m.nbytes = (size_t)1 << 32;
    EXPECT_ENCODE_FAILS("a frame holds at most");
    /* Fields a type does not carry are not judged. */
    m = sample(MESH_MSG_HELLO), m.step = -1, m.ndim = 9;
    CHECK(mesh_encode_head(&m, &head, &head_len, err, sizeof err) == 0, "%s", err);
    free(head);
#undef EXPECT_ENCODE_FAILS
}

static void test_length_prefix(void)
{
    size_t len = 1;
    char err[256] = "";
    const uint8_t le[4] = {0x78, 0x56, 0x34, 0x12};
    CHECK(mesh_decode_length(le, 0x12345678, &len, err, sizeof err) == 0 && len == 0x12345678,
          "%zx %s", len, err);
    CHECK(mesh_decode_length(le, 0x12345677, &len, err, sizeof err) != 0 && len == 0 &&
              strstr(err, "frame of 305419896 bytes is over the limit of 305419895"),
          "%s", err);
    /* 0: the default bound, 1 GiB */
    const uint8_t gib[4] = {0x00, 0x00, 0x00, 0x40}, over[4] = {0x01, 0x00, 0x00, 0x40};
    CHECK(mesh_decode_length(gib, 0, &len, err, sizeof err) == 0 && len == MESH_DEFAULT_MAX_FRAME,
          "%s", err);
    CHECK(mesh_decode_length(over, 0, &len, err, sizeof err) != 0 && strstr(err, "over the limit"),
          "%s", err);
    const uint8_t zero[4] = {0};
    CHECK(mesh_decode_length(zero, 0, &len, err, sizeof err) != 0 &&
              strstr(err, "frame length is 0"),
          "%s", err);
}

int main(void)
{
    memset(str_fill, 'x', sizeof str_fill);
    test_other_encoders();
    test_refusals();
    test_encoder_refusals();
    test_length_prefix();
    release_held();
    if (failures) {
        fprintf(stderr, "test_wire_refusals: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_wire_refusals: ok\n");
    return 0;
}

/* test_wire.c — the frame codec (mesh_encode_head, mesh_decode).
 *
 * What a node relies on: every message it sends arrives with every field and
 * every tensor byte intact; frames from other msgpack encoders (any key
 * order, any integer width) are understood; anything malformed is refused
 * with a message naming the field, never read out of bounds, never a crash.
 * Every decode here reads from a heap block of exactly the payload's size,
 * so under ASan a read one byte too far is a failure. */
#include "mesh.h"

#include <inttypes.h>
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static const char *type_names[] = {"?", "HELLO", "ACTIVATIONS", "GRADIENTS", "NORM",
                                   "TIED_GRAD", "COMMIT", "ABORT", "PROBE"};

/* ------------------------------------------------------------- messages */

static float tensor_f32[2 * 3] = {1.5f, -2.25f, 0.0f, 3e-38f, -0.0f, 65504.0f};
static uint16_t tensor_bf16[3 * 1 * 2] = {0x3f80, 0xbf80, 0x7f80, 0xff80, 0x0001, 0x8000};
static int32_t labels[3] = {17, -100, 2147483647};

/* A message of each type with every field it carries set to something
 * recognisable, extremes where a field has them. */
static mesh_msg sample(mesh_msg_type t)
{
    mesh_msg m;
    memset(&m, 0, sizeof m);
    m.type = t;
    m.run_id = mesh_run_id("wiki-7b");
    switch (t) {
    case MESH_MSG_HELLO:
        strcpy(m.name, "node-a");
        strcpy(m.text, "wiki-7b");
        break;
    case MESH_MSG_ACTIVATIONS:
        m.epoch = 3, m.step = 1234567890123, m.micro = 7, m.stage = 1, m.kept = 4095;
        m.dtype = MESH_F32, m.ndim = 2, m.shape[0] = 2, m.shape[1] = 3;
        m.data = tensor_f32, m.nbytes = sizeof tensor_f32;
        m.labels = labels, m.nlabels = 3;
        break;
    case MESH_MSG_GRADIENTS:
        m.epoch = UINT32_MAX, m.step = INT64_MAX, m.micro = INT32_MAX, m.stage = 2;
        m.dtype = MESH_BF16, m.ndim = 3, m.shape[0] = 3, m.shape[1] = 1, m.shape[2] = 2;
        m.data = tensor_bf16, m.nbytes = sizeof tensor_bf16;
        break;
    case MESH_MSG_NORM:
        m.epoch = 1, m.step = 0, m.stage = 3, m.value = 1.0 / 3.0, m.flags = 1;
        break;
    case MESH_MSG_TIED_GRAD:
        m.epoch = 0, m.step = 42, m.stage = 0;
        m.dtype = MESH_I32, m.ndim = 1, m.shape[0] = 3;
        m.data = labels, m.nbytes = sizeof labels;
        break;
    case MESH_MSG_COMMIT:
        m.epoch = 9, m.step = 43, m.stage = 4, m.value = -1e300;
        break;
    case MESH_MSG_ABORT:
        strcpy(m.text, "stage 2: out of memory (\xc3\xa9t\xc3\xa9)");
        break;
    case MESH_MSG_PROBE:
        m.step = 77, m.flags = MESH_PROBE_REPLY;
        m.data = tensor_bf16, m.nbytes = 5; /* raw bytes: any count */
        break;
    }
    return m;
}

/* The whole frame: head + tensor bytes, as the transport puts it on the wire. */
static uint8_t *encode_frame(const mesh_msg *m, size_t *len)
{
    uint8_t *head;
    size_t head_len;
    char err[256] = "";
    if (mesh_encode_head(m, &head, &head_len, err, sizeof err) != 0) {
        fprintf(stderr, "encode %s: %s\n", type_names[m->type], err);
        failures++;
        *len = 0;
        return NULL;
    }
    size_t tensor = m->data ? m->nbytes : 0;
    uint8_t *frame = malloc(head_len + tensor);
    memcpy(frame, head, head_len);
    if (tensor)
        memcpy(frame + head_len, m->data, tensor);
    free(head);
    *len = head_len + tensor;
    return frame;
}

/* Accepted payload copies stay alive for a while, since a decoded message
 * points into its payload: a ring of the last few is enough for any test
 * here to compare two messages. */
#define HELD 4
static uint8_t *held[HELD];
static int held_next;

static void release_held(void)
{
    for (int i = 0; i < HELD; i++)
        free(held[i]), held[i] = NULL;
}

/* Decodes from a heap block of exactly len bytes. */
static int decode_exact(const void *payload, size_t len, mesh_msg *out, char *err,
                        size_t errlen)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (len)
        memcpy(copy, payload, len);
    int rc = mesh_decode(copy, len, out, err, errlen);
    if (rc == 0) {
        free(held[held_next]);
        held[held_next] = copy;
        held_next = (held_next + 1) % HELD;
    } else {
        free(copy);
    }
    return rc;
}

static int same_double(double a, double b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* Every field, and the bytes behind the pointers. */
static int msg_equal(const mesh_msg *a, const mesh_msg *b, int line)
{
    int ok = a->type == b->type && a->run_id == b->run_id && a->epoch == b->epoch &&
             a->step == b->step && a->micro == b->micro && a->stage == b->stage &&
             a->kept == b->kept && same_double(a->value, b->value) && a->flags == b->flags &&
             strcmp(a->name, b->name) == 0 && strcmp(a->text, b->text) == 0 &&
             a->dtype == b->dtype && a->ndim == b->ndim && a->nbytes == b->nbytes &&
             a->nlabels == b->nlabels;
    for (int i = 0; ok && i < MESH_MAX_DIMS; i++)
        ok = (i < a->ndim ? a->shape[i] : 0) == (i < b->ndim ? b->shape[i] : 0);
    if (ok && a->nbytes)
        ok = memcmp(a->data, b->data, a->nbytes) == 0;
    if (ok && a->nlabels)
        ok = memcmp(a->labels, b->labels, a->nlabels * 4) == 0;
    if (!ok) {
        failures++;
        fprintf(stderr, "%s:%d: FAIL: messages differ (%s)\n", __FILE__, line,
                type_names[a->type < 8 ? a->type : 0]);
    }
    return ok;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Encodes, decodes and compares every field and byte. */
static void round_trip(const mesh_msg *m, int line)
{
    size_t len;
    uint8_t *frame = encode_frame(m, &len);
    if (!frame)
        return;
    CHECK(len >= 4 && le32(frame) == len - 4, "%s: prefix %u, payload %zu",
          type_names[m->type], (unsigned)le32(frame), len - 4);
    /* "data" is last: the tensor is the tail of the frame. */
    if (m->nbytes)
        CHECK(memcmp(frame + len - m->nbytes, m->data, m->nbytes) == 0, "tensor not at the end");
    mesh_msg back;
    char err[256] = "";
    int rc = decode_exact(frame + 4, len - 4, &back, err, sizeof err);
    CHECK(rc == 0, "decode %s: %s", type_names[m->type], err);
    if (rc == 0) {
        CHECK(back.version == MESH_PROTOCOL_VERSION, "version %u", back.version);
        msg_equal(m, &back, line);
    }
    free(frame);
}

static void test_round_trip_every_type(void)
{
    for (int t = MESH_MSG_HELLO; t <= MESH_MSG_PROBE; t++) {
        mesh_msg m = sample((mesh_msg_type)t);
        round_trip(&m, __LINE__);
    }

    /* Extremes: the longest strings, empty strings, the largest ids. */
    mesh_msg h = sample(MESH_MSG_HELLO);
    memset(h.name, 'n', MESH_NAME_MAX - 1);
    h.name[MESH_NAME_MAX - 1] = 0;
    memset(h.text, 't', MESH_TEXT_MAX - 1);
    h.text[MESH_TEXT_MAX - 1] = 0;
    h.run_id = UINT64_MAX;
    round_trip(&h, __LINE__);
    h.name[0] = 0, h.text[0] = 0, h.run_id = 0;
    round_trip(&h, __LINE__);

    /* Values are carried bit for bit: NaN, -0, infinity, a denormal. */
    double values[] = {NAN, -0.0, INFINITY, -INFINITY, 4.9e-324, 0.1};
    for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
        mesh_msg n = sample(MESH_MSG_NORM);
        n.value = values[i];
        n.flags = UINT32_MAX;
        round_trip(&n, __LINE__);
    }

    /* Empty tensors, no labels, a scalar (0 dims: one element), 4 dims. */
    mesh_msg a = sample(MESH_MSG_ACTIVATIONS);
    a.ndim = 2, a.shape[0] = 0, a.shape[1] = 4096, a.data = NULL, a.nbytes = 0;
    a.labels = NULL, a.nlabels = 0, a.kept = 0;
    round_trip(&a, __LINE__);
    a.ndim = 0, a.data = tensor_f32, a.nbytes = 4;
    round_trip(&a, __LINE__);
    a.ndim = 4, a.shape[0] = 1, a.shape[1] = 2, a.shape[2] = 1, a.shape[3] = 3;
    a.nbytes = sizeof tensor_f32;
    round_trip(&a, __LINE__);
    /* A zero dim makes the tensor empty however large the others are. */
    a.shape[0] = INT64_MAX, a.shape[1] = INT64_MAX, a.shape[2] = 0, a.nbytes = 0;
    round_trip(&a, __LINE__);

    /* A tensor large enough that its bin is a bin32. */
    size_t big = 70000 * sizeof(float);
    float *t = calloc(70000, sizeof(float));
    for (int i = 0; i < 70000; i++)
        t[i] = (float)i * 0.5f;
    mesh_msg g = sample(MESH_MSG_GRADIENTS);
    g.dtype = MESH_F32, g.ndim = 2, g.shape[0] = 7, g.shape[1] = 10000, g.data = t,
    g.nbytes = big;
    round_trip(&g, __LINE__);
    free(t);
}

static void test_head_layout(void)
{
    /* The head ends with the bin header of "data", and the length prefix
     * counts the tensor the caller appends. */
    mesh_msg m = sample(MESH_MSG_ACTIVATIONS);
    uint8_t *head;
    size_t head_len;
    char err[256];
    CHECK(mesh_encode_head(&m, &head, &head_len, err, sizeof err) == 0, "%s", err);
    CHECK(le32(head) == head_len - 4 + m.nbytes, "prefix %u", (unsigned)le32(head));
    CHECK(head[head_len - 2] == 0xc4 && head[head_len - 1] == m.nbytes, "bin8 header %02x %02x",
          head[head_len - 2], head[head_len - 1]);
    /* The key just before it is "data". */
    CHECK(memcmp(head + head_len - 7, "\xa4" "data", 5) == 0, "data is not the last key");
    free(head);

    /* The example in docs/PROTOCOL.md, byte for byte: the wire format is a
     * promise to other implementations, not whatever the encoder does. */
    static const uint8_t commit[] = {
        0x2f, 0x00, 0x00, 0x00, 0x87, 0xa1, 0x76, 0x01, 0xa1, 0x74, 0x06, 0xa3, 0x72,
        0x75, 0x6e, 0xcf, 0xd3, 0xe6, 0xda, 0xd8, 0x5d, 0x52, 0x6c, 0x71, 0xa2, 0x65,
        0x70, 0x09, 0xa4, 0x73, 0x74, 0x65, 0x70, 0x2b, 0xa2, 0x73, 0x74, 0x04, 0xa3,
        0x76, 0x61, 0x6c, 0xcb, 0x40, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    };
    mesh_msg c;
    memset(&c, 0, sizeof c);
    c.type = MESH_MSG_COMMIT, c.run_id = mesh_run_id("wiki-7b");
    c.epoch = 9, c.step = 43, c.stage = 4, c.value = 2.5;
    CHECK(mesh_encode_head(&c, &head, &head_len, err, sizeof err) == 0 &&
              head_len == sizeof commit && memcmp(head, commit, sizeof commit) == 0,
          "COMMIT differs from docs/PROTOCOL.md (%zu bytes) %s", head_len, err);
    free(head);

    /* The encoder ignores m->version: it always speaks its own. */
    m.version = 7;
    size_t len;
    uint8_t *frame = encode_frame(&m, &len);
    mesh_msg back;
    CHECK(frame && decode_exact(frame + 4, len - 4, &back, err, sizeof err) == 0 &&
              back.version == MESH_PROTOCOL_VERSION,
          "%s", err);
    free(frame);
}

/* ------------------------------------------------------ hand-made frames */

/* Frames built field by field with msgpack-c's packer, so a test can put keys
 * in any order, use any width, or break exactly one thing. */
typedef enum { F_UINT, F_INT, F_F64, F_F32, F_STR, F_BIN, F_SHAPE, F_NIL, F_U64W, F_I8W,
               F_MAP } fkind;
typedef struct {
    const char *key;
    fkind kind;
    uint64_t u;
    int64_t i;
    double f;
    const char *s;  /* F_STR, F_BIN: bytes; NULL with n: n bytes of 'x' */
    size_t n;
    int ndim;
    int64_t dims[8];
} field;

#define MAXF 24

static uint8_t str_fill[70000];

static void pack_field(msgpack_packer *pk, const field *f)
{
    size_t kl = strlen(f->key);
    msgpack_pack_str(pk, kl);
    msgpack_pack_str_body(pk, f->key, kl);
    const void *bytes = f->s ? (const void *)f->s : str_fill;
    switch (f->kind) {
    case F_UINT: msgpack_pack_uint64(pk, f->u); break;
    case F_INT: msgpack_pack_int64(pk, f->i); break;
    case F_U64W: msgpack_pack_fix_uint64(pk, f->u); break;
    case F_I8W: msgpack_pack_fix_int8(pk, (int8_t)f->i); break;
    case F_F64: msgpack_pack_double(pk, f->f); break;
    case F_F32: msgpack_pack_float(pk, (float)f->f); break;
    case F_STR:
        msgpack_pack_str(pk, f->n);
        msgpack_pack_str_body(pk, bytes, f->n);
        break;
    case F_BIN:
        msgpack_pack_bin(pk, f->n);
        msgpack_pack_bin_body(pk, bytes, f->n);
        break;
    case F_SHAPE:
        msgpack_pack_array(pk, (size_t)f->ndim);
        for (int d = 0; d < f->ndim; d++)
            msgpack_pack_int64(pk, f->dims[d]);
        break;
    case F_NIL: msgpack_pack_nil(pk); break;
    case F_MAP: msgpack_pack_map(pk, 0); break;
    }
}

static void pack_fields(const field *fs, size_t n, msgpack_sbuffer *sb)
{
    msgpack_packer pk;
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, n);
    for (size_t i = 0; i < n; i++)
        pack_field(&pk, &fs[i]);
}

#define U(k, v) ((field){.key = (k), .kind = F_UINT, .u = (v)})
#define I(k, v) ((field){.key = (k), .kind = F_INT, .i = (v)})
#define S(k, str) ((field){.key = (k), .kind = F_STR, .s = (str), .n = strlen(str)})
#define B(k, ptr, len) ((field){.key = (k), .kind = F_BIN, .s = (const char *)(ptr), .n = (len)})

/* A valid ACTIVATIONS, keys in an order the encoder never uses ("data" first). */
static size_t base_activations(field *f)
{
    size_t n = 0;
    f[n++] = B("data", tensor_f32, sizeof tensor_f32);
    f[n++] = (field){.key = "shape", .kind = F_SHAPE, .ndim = 2, .dims = {2, 3}};
    f[n++] = B("lab", labels, sizeof labels);
    f[n++] = U("dt", MESH_F32);
    f[n++] = I("kept", 4095);
    f[n++] = I("st", 1);
    f[n++] = I("mb", 7);
    f[n++] = I("step", 1234567890123);
    f[n++] = U("ep", 3);
    f[n++] = U("run", mesh_run_id("wiki-7b"));
    f[n++] = U("t", MESH_MSG_ACTIVATIONS);
    f[n++] = U("v", MESH_PROTOCOL_VERSION);
    return n;
}

static size_t base_gradients(field *f)
{
    size_t n = 0;
    f[n++] = U("t", MESH_MSG_GRADIENTS);
    f[n++] = U("v", MESH_PROTOCOL_VERSION);
    f[n++] = U("run", 5);
    f[n++] = U("ep", 1);
    f[n++] = I("step", 2);
    f[n++] = I("mb", 0);
    f[n++] = I("st", 1);
    f[n++] = U("dt", MESH_BF16);
    f[n++] = (field){.key = "shape", .kind = F_SHAPE, .ndim = 3, .dims = {3, 1, 2}};
    f[n++] = B("data", tensor_bf16, sizeof tensor_bf16);
    return n;
}

static size_t base_hello(field *f)
{
    size_t n = 0;
    f[n++] = S("name", "node-a");
    f[n++] = U("v", MESH_PROTOCOL_VERSION);
    f[n++] = S("text", "wiki-7b");
    f[n++] = U("run", mesh_run_id("wiki-7b"));
    f[n++] = U("t", MESH_MSG_HELLO);
    return n;
}

static size_t base_norm(field *f)
{
    size_t n = 0;
    f[n++] = U("v", MESH_PROTOCOL_VERSION);
    f[n++] = U("t", MESH_MSG_NORM);
    f[n++] = U("run", 9);
    f[n++] = U("ep", 1);
    f[n++] = I("step", 0);
    f[n++] = I("st", 3);
    f[n++] = (field){.key = "val", .kind = F_F64, .f = 1.0 / 3.0};
    f[n++] = U("fl", 1);
    return n;
}

/* Replaces the field with that key, or appends it. */
static size_t set(field *f, size_t n, field v)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(f[i].key, v.key) == 0) {
            f[i] = v;
            return n;
        }
    f[n] = v;
    return n + 1;
}

static size_t drop(field *f, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(f[i].key, key) == 0) {
            memmove(f + i, f + i + 1, (n - i - 1) * sizeof *f);
            return n - 1;
        }
    return n;
}

static int decode_fields(const field *f, size_t n, mesh_msg *m, char *err, size_t errlen)
{
    msgpack_sbuffer sb;
    pack_fields(f, n, &sb);
    int rc = decode_exact(sb.data, sb.size, m, err, errlen);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

static void expect_refused(int line, const field *f, size_t n, const char *needle)
{
    mesh_msg m;
    char err[512] = "";
    int rc = decode_fields(f, n, &m, err, sizeof err);
    mesh_msg zero;
    memset(&zero, 0, sizeof zero);
    if (rc == 0 || !strstr(err, needle) || memcmp(&m, &zero, sizeof m) != 0) {
        failures++;
        fprintf(stderr, "%s:%d: FAIL: expected a refusal naming '%s'\n  rc=%d message: %s\n",
                __FILE__, line, needle, rc, err);
    }
}
#define EXPECT_REFUSED(f, n, needle) expect_refused(__LINE__, f, n, needle)

static void expect_refused_bytes(int line, const void *p, size_t len, const char *needle)
{
    mesh_msg m;
    char err[512] = "";
    int rc = decode_exact(p, len, &m, err, sizeof err);
    if (rc == 0 || !strstr(err, needle)) {
        failures++;
        fprintf(stderr, "%s:%d: FAIL: expected a refusal naming '%s'\n  rc=%d message: %s\n",
                __FILE__, line, needle, rc, err);
    }
}
#define EXPECT_REFUSED_BYTES(p, len, needle) expect_refused_bytes(__LINE__, p, len, needle)

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
        0xd9, 0x01, 'v', 0xcf, 0, 0, 0, 0, 0, 0, 0, 1,        /* "v": uint64 1 */
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
        0xa1, 'v', 0x01,
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
    n = base_activations(f), n = set(f, n, U("v", 2));
    EXPECT_REFUSED(f, n, "protocol version 2, this node speaks 1");
    n = set(f, n, U("t", 99)), n = set(f, n, U("future", 1));
    EXPECT_REFUSED(f, n, "protocol version 2, this node speaks 1");
    n = base_hello(f), n = set(f, n, U("v", 0));
    EXPECT_REFUSED(f, n, "protocol version 0, this node speaks 1");
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
    static const uint8_t map32[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'v', 0x01};
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
    n = base_hello(f), n = set(f, n, U("v", 2));
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

/* -------------------------------------------------- truncation and noise */

static void test_truncation(void)
{
    for (int t = MESH_MSG_HELLO; t <= MESH_MSG_PROBE; t++) {
        mesh_msg m = sample((mesh_msg_type)t);
        size_t len;
        uint8_t *frame = encode_frame(&m, &len);
        if (!frame)
            continue;
        /* Every proper prefix of the payload is refused; decode_exact puts it
         * in a block of exactly that size, so ASan catches any over-read. */
        for (size_t cut = 0; cut < len - 4; cut++) {
            mesh_msg back;
            char err[256] = "";
            int rc = decode_exact(frame + 4, cut, &back, err, sizeof err);
            CHECK(rc != 0 && (strstr(err, "payload ends inside") || strstr(err, "empty payload")),
                  "%s cut at %zu of %zu: rc=%d '%s'", type_names[t], cut, len - 4, rc, err);
        }
        free(frame);
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

/* Random damage never crashes the decoder, and whatever it still accepts is
 * a message the encoder accepts too and that survives a round trip. */
static void test_random_damage(void)
{
    int accepted = 0, tried = 0;
    for (int t = MESH_MSG_HELLO; t <= MESH_MSG_PROBE; t++) {
        mesh_msg m = sample((mesh_msg_type)t);
        size_t len;
        uint8_t *frame = encode_frame(&m, &len);
        if (!frame)
            continue;
        size_t plen = len - 4;
        uint8_t *p = malloc(plen);
        for (int iter = 0; iter < 20000; iter++) {
            memcpy(p, frame + 4, plen);
            int flips = 1 + (int)(rng() % 4);
            for (int k = 0; k < flips; k++) {
                size_t at = (size_t)(rng() % plen);
                if (rng() % 4 == 0)
                    p[at] = (uint8_t)rng(); /* a whole byte */
                else
                    p[at] ^= (uint8_t)(1u << (rng() % 8));
            }
            size_t use = rng() % 8 == 0 ? (size_t)(rng() % (plen + 1)) : plen;
            mesh_msg back;
            char err[256] = "";
            tried++;
            if (decode_exact(p, use, &back, err, sizeof err) != 0) {
                CHECK(err[0] != 0, "refused without a message");
                continue;
            }
            accepted++;
            uint8_t *again_frame;
            size_t again_len;
            again_frame = encode_frame(&back, &again_len);
            if (!again_frame)
                continue;
            mesh_msg again;
            if (decode_exact(again_frame + 4, again_len - 4, &again, err, sizeof err) != 0) {
                CHECK(0, "re-encoded frame refused: %s", err);
            } else {
                msg_equal(&back, &again, __LINE__);
            }
            free(again_frame);
        }
        free(p);
        free(frame);
    }
    /* Some damage is harmless (a flipped tensor bit): the round trip above
     * was actually exercised. */
    CHECK(accepted > 0 && accepted < tried, "%d of %d accepted", accepted, tried);
}

/* PROBE: raw bytes without dt or shape, bounded by MESH_PROBE_MAX. */
static size_t base_probe(field *f, const void *data, size_t len)
{
    size_t n = 0;
    f[n++] = U("v", MESH_PROTOCOL_VERSION);
    f[n++] = U("t", MESH_MSG_PROBE);
    f[n++] = U("run", 7);
    f[n++] = I("step", 12);
    f[n++] = U("fl", 0);
    f[n++] = B("data", data, len);
    return n;
}

static void test_probe(void)
{
    /* Round trips: a request, a reply, no bytes, bytes of odd count. */
    mesh_msg m = sample(MESH_MSG_PROBE);
    round_trip(&m, __LINE__);
    m.flags = 0, m.data = NULL, m.nbytes = 0, m.step = 0;
    round_trip(&m, __LINE__);
    size_t big = 300000;
    uint8_t *bytes = malloc(big);
    for (size_t i = 0; i < big; i++)
        bytes[i] = (uint8_t)(i * 7);
    m.data = bytes, m.nbytes = big, m.step = INT64_MAX;
    round_trip(&m, __LINE__);

    /* Decoded: no dtype or shape, data points at the bytes. */
    field f[MAXF];
    mesh_msg d;
    char err[512] = "";
    size_t n = base_probe(f, bytes, 33);
    CHECK(decode_fields(f, n, &d, err, sizeof err) == 0 && d.type == MESH_MSG_PROBE &&
              d.step == 12 && d.flags == 0 && d.nbytes == 33 && d.ndim == 0 &&
              memcmp(d.data, bytes, 33) == 0,
          "probe decode: %s", err);

    /* Refusals. */
    n = base_probe(f, bytes, 8), n = set(f, n, U("dt", MESH_I32));
    EXPECT_REFUSED(f, n, "key \"dt\" is not allowed in PROBE");
    n = base_probe(f, bytes, 8),
    n = set(f, n, (field){.key = "shape", .kind = F_SHAPE, .ndim = 1, .dims = {2}});
    EXPECT_REFUSED(f, n, "key \"shape\" is not allowed in PROBE");
    n = base_probe(f, bytes, 8), n = drop(f, n, "fl");
    EXPECT_REFUSED(f, n, "PROBE is missing key \"fl\"");
    n = base_probe(f, bytes, 8), n = drop(f, n, "data");
    EXPECT_REFUSED(f, n, "PROBE is missing key \"data\"");
    n = base_probe(f, bytes, 8), n = drop(f, n, "step");
    EXPECT_REFUSED(f, n, "PROBE is missing key \"step\"");
    n = base_probe(f, bytes, 8), n = set(f, n, I("step", -1));
    EXPECT_REFUSED(f, n, "\"step\" is negative (-1)");
    n = base_probe(f, bytes, 8), n = set(f, n, S("data", "abc"));
    EXPECT_REFUSED(f, n, "\"data\" must be a bin, got a string");
    uint8_t *huge = calloc(1, MESH_PROBE_MAX + 1);
    n = base_probe(f, huge, MESH_PROBE_MAX + 1);
    EXPECT_REFUSED(f, n, "PROBE: \"data\" has 67108865 bytes, at most 67108864");
    n = base_probe(f, huge, MESH_PROBE_MAX);
    CHECK(decode_fields(f, n, &d, err, sizeof err) == 0 && d.nbytes == MESH_PROBE_MAX,
          "probe of the largest size: %s", err);

    /* The encoder refuses the same. */
    uint8_t *head = NULL;
    size_t head_len = 0;
    m = sample(MESH_MSG_PROBE), m.data = huge, m.nbytes = MESH_PROBE_MAX + 1;
    CHECK(mesh_encode_head(&m, &head, &head_len, err, sizeof err) != 0 &&
              strstr(err, "PROBE: \"data\" has 67108865 bytes, at most 67108864") && !head,
          "encode huge probe: %s", err);
    m = sample(MESH_MSG_PROBE), m.data = NULL, m.nbytes = 4;
    CHECK(mesh_encode_head(&m, &head, &head_len, err, sizeof err) != 0 &&
              strstr(err, "PROBE: \"data\" is NULL with 4 bytes") && !head,
          "encode probe without data: %s", err);
    m = sample(MESH_MSG_PROBE), m.step = -5;
    CHECK(mesh_encode_head(&m, &head, &head_len, err, sizeof err) != 0 &&
              strstr(err, "\"step\" is negative (-5)") && !head,
          "encode probe with a negative step: %s", err);
    /* dtype and shape a caller leaves set are not part of a PROBE. */
    m = sample(MESH_MSG_PROBE), m.dtype = MESH_F32, m.ndim = 2, m.shape[0] = 99;
    CHECK(mesh_encode_head(&m, &head, &head_len, err, sizeof err) == 0, "%s", err);
    free(head);
    free(huge);
    free(bytes);
    release_held();
}

int main(void)
{
    memset(str_fill, 'x', sizeof str_fill);
    test_round_trip_every_type();
    test_head_layout();
    test_other_encoders();
    test_refusals();
    test_encoder_refusals();
    test_length_prefix();
    test_truncation();
    test_random_damage();
    test_probe();
    release_held();
    if (failures) {
        fprintf(stderr, "test_wire: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_wire: ok\n");
    return 0;
}

/* wire_fixture.h — what the codec tests share: sample messages of every
 * type, exact-size decoding, field-by-field frame building with msgpack-c.
 * Included by test_wire.c and test_wire_refusals.c only. */
#ifndef SHARDNODE_TEST_WIRE_FIXTURE_H
#define SHARDNODE_TEST_WIRE_FIXTURE_H

#include "mesh.h"

#include <inttypes.h>
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static __attribute__((unused)) const char *type_names[] = {"?", "HELLO", "ACTIVATIONS", "GRADIENTS", "NORM",
                                   "TIED_GRAD", "COMMIT", "ABORT", "PROBE"};

/* ------------------------------------------------------------- messages */

static __attribute__((unused)) float tensor_f32[2 * 3] = {1.5f, -2.25f, 0.0f, 3e-38f, -0.0f, 65504.0f};
static __attribute__((unused)) uint16_t tensor_bf16[3 * 1 * 2] = {0x3f80, 0xbf80, 0x7f80, 0xff80, 0x0001, 0x8000};
static __attribute__((unused)) int32_t labels[3] = {17, -100, 2147483647};

/* A message of each type with every field it carries set to something
 * recognisable, extremes where a field has them. */
static inline mesh_msg sample(mesh_msg_type t)
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
        m.flags = MESH_COMMIT_STOP | MESH_COMMIT_DONE;
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
static inline uint8_t *encode_frame(const mesh_msg *m, size_t *len)
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
static __attribute__((unused)) uint8_t *held[HELD];
static __attribute__((unused)) int held_next;

static inline void release_held(void)
{
    for (int i = 0; i < HELD; i++)
        free(held[i]), held[i] = NULL;
}

/* Decodes from a heap block of exactly len bytes. */
static inline int decode_exact(const void *payload, size_t len, mesh_msg *out, char *err,
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

static inline int same_double(double a, double b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* Every field, and the bytes behind the pointers. */
static inline int msg_equal(const mesh_msg *a, const mesh_msg *b, int line)
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

static inline uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Encodes, decodes and compares every field and byte. */
static inline void round_trip(const mesh_msg *m, int line)
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

static __attribute__((unused)) uint8_t str_fill[70000];

static inline void pack_field(msgpack_packer *pk, const field *f)
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

static inline void pack_fields(const field *fs, size_t n, msgpack_sbuffer *sb)
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
static inline size_t base_activations(field *f)
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

static inline size_t base_gradients(field *f)
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

static inline size_t base_hello(field *f)
{
    size_t n = 0;
    f[n++] = S("name", "node-a");
    f[n++] = U("v", MESH_PROTOCOL_VERSION);
    f[n++] = S("text", "wiki-7b");
    f[n++] = U("run", mesh_run_id("wiki-7b"));
    f[n++] = U("t", MESH_MSG_HELLO);
    return n;
}

static inline size_t base_norm(field *f)
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
static inline size_t set(field *f, size_t n, field v)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(f[i].key, v.key) == 0) {
            f[i] = v;
            return n;
        }
    f[n] = v;
    return n + 1;
}

static inline size_t drop(field *f, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(f[i].key, key) == 0) {
            memmove(f + i, f + i + 1, (n - i - 1) * sizeof *f);
            return n - 1;
        }
    return n;
}

static inline int decode_fields(const field *f, size_t n, mesh_msg *m, char *err, size_t errlen)
{
    msgpack_sbuffer sb;
    pack_fields(f, n, &sb);
    int rc = decode_exact(sb.data, sb.size, m, err, errlen);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

static inline void expect_refused(int line, const field *f, size_t n, const char *needle)
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

static inline void expect_refused_bytes(int line, const void *p, size_t len, const char *needle)
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

#endif

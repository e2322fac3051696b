/* wire.c — the frame codec (see mesh.h and docs/PROTOCOL.md): the key table
 * (private wire_internal.h), the length prefix and the encoder. The encoder
 * packs with msgpack-c, so the bytes on the wire come from a real msgpack
 * implementation; the decoder, a strict reader of our own, is
 * wire_decode.c. */
#include "mesh.h"
#include "mesh_internal.h"
#include "wire_internal.h"

#include <inttypes.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tensors and labels travel in host byte order, and the protocol fixes that
 * as little-endian: refuse to build where the two would silently differ. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "mesh/ sends tensors in host byte order; the protocol requires little-endian hosts"
#endif

/* FNV-1a 64: stable across machines and builds. */
uint64_t mesh_run_id(const char *run)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)run; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

size_t mesh_dtype_size(mesh_dtype d)
{
    switch (d) {
    case MESH_F32: return 4;
    case MESH_BF16: return 2;
    case MESH_I32: return 4;
    }
    return 0;
}

/* ------------------------------------------------------------------ keys */


const char *const wire_key_names[K_COUNT] = {
    "v", "t", "run", "ep", "step", "mb", "st", "kept", "val", "fl",
    "name", "text", "dt", "shape", "lab", "data",
};

#define COMMON (KEY(K_V) | KEY(K_T) | KEY(K_RUN))

/* Every key a type allows is also required: a frame is either complete or
 * refused, so a receiver never guesses a default. */
static const struct {
    const char *name;
    uint32_t keys;
} msg_types[] = {
    [MESH_MSG_HELLO] = {"HELLO", COMMON | KEY(K_NAME) | KEY(K_TEXT)},
    [MESH_MSG_ACTIVATIONS] = {"ACTIVATIONS",
                              COMMON | KEY(K_EP) | KEY(K_STEP) | KEY(K_MB) | KEY(K_ST) |
                                  KEY(K_KEPT) | KEY(K_DT) | KEY(K_SHAPE) | KEY(K_LAB) |
                                  KEY(K_DATA)},
    [MESH_MSG_GRADIENTS] = {"GRADIENTS", COMMON | KEY(K_EP) | KEY(K_STEP) | KEY(K_MB) |
                                             KEY(K_ST) | KEY(K_DT) | KEY(K_SHAPE) |
                                             KEY(K_DATA)},
    [MESH_MSG_NORM] = {"NORM", COMMON | KEY(K_EP) | KEY(K_STEP) | KEY(K_ST) | KEY(K_VAL) |
                                   KEY(K_FL)},
    [MESH_MSG_TIED_GRAD] = {"TIED_GRAD", COMMON | KEY(K_EP) | KEY(K_STEP) | KEY(K_ST) |
                                             KEY(K_DT) | KEY(K_SHAPE) | KEY(K_DATA)},
    [MESH_MSG_COMMIT] = {"COMMIT",
                         COMMON | KEY(K_EP) | KEY(K_STEP) | KEY(K_ST) | KEY(K_VAL) |
                             KEY(K_FL)},
    [MESH_MSG_ABORT] = {"ABORT", COMMON | KEY(K_TEXT)},
    /* data without dt and shape: raw bytes, bounded by MESH_PROBE_MAX. */
    [MESH_MSG_PROBE] = {"PROBE", COMMON | KEY(K_STEP) | KEY(K_FL) | KEY(K_DATA)},
};
#define MSG_TYPE_MAX MESH_MSG_PROBE

uint32_t wire_type_keys(mesh_msg_type t)
{
    return msg_types[t].keys;
}

const char *wire_type_name(mesh_msg_type t)
{
    return msg_types[t].name;
}

int wire_known_type(uint64_t t)
{
    return t >= MESH_MSG_HELLO && t <= MSG_TYPE_MAX;
}

static const char *dtype_name(mesh_dtype d)
{
    switch (d) {
    case MESH_F32: return "f32";
    case MESH_BF16: return "bf16";
    case MESH_I32: return "i32";
    }
    return "?";
}

int mesh_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* The tensor's byte count must be exactly numel(shape) * dtype size; the
 * product is computed without overflow (a zero dim makes it zero whatever
 * the others are), so a hostile shape cannot wrap around to match. */
int wire_tensor_check(mesh_dtype dt, int ndim, const int64_t *shape, size_t nbytes,
                        char *err, size_t errlen)
{
    size_t esize = mesh_dtype_size(dt);
    if (!esize)
        return mesh_errf(err, errlen, "\"dt\" is %d, not a dtype (0 f32, 1 bf16, 2 i32)",
                       (int)dt);
    if (ndim < 0 || ndim > MESH_MAX_DIMS)
        return mesh_errf(err, errlen, "\"shape\" has %d dims, at most %d", ndim,
                       MESH_MAX_DIMS);
    char dims[MESH_MAX_DIMS * 24 + 4] = "[";
    size_t used = 1;
    int zero = 0, overflow = 0;
    uint64_t need = esize;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return mesh_errf(err, errlen, "\"shape[%d]\" is negative (%" PRId64 ")", i,
                           shape[i]);
        used += (size_t)snprintf(dims + used, sizeof dims - used, "%s%" PRId64,
                                 i ? ", " : "", shape[i]);
        uint64_t d = (uint64_t)shape[i];
        if (d == 0)
            zero = 1;
        else if (need > UINT64_MAX / d)
            overflow = 1;
        else
            need *= d;
    }
    snprintf(dims + used, sizeof dims - used, "]");
    if (zero)
        need = 0, overflow = 0;
    if (overflow || need > SIZE_MAX)
        return mesh_errf(err, errlen, "\"data\" has %zu bytes, shape %s %s needs more than %ju",
                       nbytes, dims, dtype_name(dt), (uintmax_t)UINT64_MAX);
    if (need != nbytes)
        return mesh_errf(err, errlen, "\"data\" has %zu bytes, shape %s %s needs %" PRIu64,
                       nbytes, dims, dtype_name(dt), need);
    return 0;
}

/* ---------------------------------------------------------------- encoder */

static int check_count(const char *key, int64_t v, char *err, size_t errlen)
{
    if (v < 0)
        return mesh_errf(err, errlen, "\"%s\" is negative (%" PRId64 ")", key, v);
    return 0;
}

static int check_string(const char *key, const char *s, size_t cap, char *err, size_t errlen)
{
    if (!memchr(s, 0, cap))
        return mesh_errf(err, errlen, "\"%s\" is longer than %zu bytes", key, cap - 1);
    return 0;
}

static int pack_key(msgpack_packer *pk, int k)
{
    size_t n = strlen(wire_key_names[k]);
    return msgpack_pack_str(pk, n) | msgpack_pack_str_body(pk, wire_key_names[k], n);
}

int mesh_encode_head(const mesh_msg *m, uint8_t **head, size_t *head_len, char *err,
                     size_t errlen)
{
    *head = NULL;
    *head_len = 0;
    if (!wire_known_type((uint64_t)m->type))
        return mesh_errf(err, errlen, "\"t\" is %d, not a message type", (int)m->type);
    uint32_t keys = msg_types[m->type].keys;
    const char *tname = msg_types[m->type].name;

    /* The checks the decoder makes, so a node never sends what its peer
     * must refuse. */
    if ((keys & KEY(K_STEP)) && check_count("step", m->step, err, errlen))
        return -1;
    if ((keys & KEY(K_MB)) && check_count("mb", m->micro, err, errlen))
        return -1;
    if ((keys & KEY(K_ST)) && check_count("st", m->stage, err, errlen))
        return -1;
    if ((keys & KEY(K_KEPT)) && check_count("kept", m->kept, err, errlen))
        return -1;
    if ((keys & KEY(K_KEPT)) && m->kept == 0)
        return mesh_errf(err, errlen, "%s: \"kept\" is 0: the loss is divided by it, and a "
                         "batch has at least one kept target", tname);
    if ((keys & KEY(K_NAME)) && check_string("name", m->name, MESH_NAME_MAX, err, errlen))
        return -1;
    if ((keys & KEY(K_TEXT)) && check_string("text", m->text, MESH_TEXT_MAX, err, errlen))
        return -1;
    if (keys & KEY(K_DATA)) {
        if ((keys & KEY(K_DT)) &&
            wire_tensor_check(m->dtype, m->ndim, m->shape, m->nbytes, err, errlen))
            return -1;
        if (!(keys & KEY(K_DT)) && m->nbytes > MESH_PROBE_MAX)
            return mesh_errf(err, errlen, "%s: \"data\" has %zu bytes, at most %zu", tname,
                           m->nbytes, MESH_PROBE_MAX);
        if (m->nbytes && !m->data)
            return mesh_errf(err, errlen, "%s: \"data\" is NULL with %zu bytes", tname,
                           m->nbytes);
    }
    if (keys & KEY(K_LAB)) {
        if (m->nlabels > UINT32_MAX / 4)
            return mesh_errf(err, errlen, "\"lab\" has %zu labels, at most %u", m->nlabels,
                           UINT32_MAX / 4);
        if (m->nlabels && !m->labels)
            return mesh_errf(err, errlen, "%s: \"lab\" is NULL with %zu labels", tname,
                           m->nlabels);
    }

    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    /* The length prefix is patched in below, once the payload size is known. */
    int rc = msgpack_sbuffer_write(&sb, "\0\0\0\0", 4);
    int nkeys = 0;
    for (int k = 0; k < K_COUNT; k++)
        nkeys += (keys >> k) & 1;
    rc |= msgpack_pack_map(&pk, (size_t)nkeys);
    for (int k = 0; k < K_COUNT; k++) {
        if (!(keys & KEY(k)))
            continue;
        rc |= pack_key(&pk, k);
        switch (k) {
        case K_V: rc |= msgpack_pack_uint32(&pk, MESH_PROTOCOL_VERSION); break;
        case K_T: rc |= msgpack_pack_uint32(&pk, (uint32_t)m->type); break;
        case K_RUN: rc |= msgpack_pack_uint64(&pk, m->run_id); break;
        case K_EP: rc |= msgpack_pack_uint32(&pk, m->epoch); break;
        case K_STEP: rc |= msgpack_pack_int64(&pk, m->step); break;
        case K_MB: rc |= msgpack_pack_int32(&pk, m->micro); break;
        case K_ST: rc |= msgpack_pack_int32(&pk, m->stage); break;
        case K_KEPT: rc |= msgpack_pack_int64(&pk, m->kept); break;
        case K_VAL: rc |= msgpack_pack_double(&pk, m->value); break;
        case K_FL: rc |= msgpack_pack_uint32(&pk, m->flags); break;
        case K_NAME:
        case K_TEXT: {
            const char *s = k == K_NAME ? m->name : m->text;
            size_t n = strlen(s);
            rc |= msgpack_pack_str(&pk, n) | msgpack_pack_str_body(&pk, s, n);
            break;
        }
        case K_DT: rc |= msgpack_pack_uint32(&pk, (uint32_t)m->dtype); break;
        case K_SHAPE:
            rc |= msgpack_pack_array(&pk, (size_t)m->ndim);
            for (int i = 0; i < m->ndim; i++)
                rc |= msgpack_pack_int64(&pk, m->shape[i]);
            break;
        case K_LAB:
            rc |= msgpack_pack_bin(&pk, m->nlabels * 4);
            rc |= msgpack_pack_bin_body(&pk, m->labels, m->nlabels * 4);
            break;
        case K_DATA:
            /* Only the bin header: the caller sends the tensor bytes. */
            rc |= msgpack_pack_bin(&pk, m->nbytes);
            break;
        }
    }
    if (rc) {
        msgpack_sbuffer_destroy(&sb);
        return mesh_errf(err, errlen, "%s: out of memory encoding the frame", tname);
    }
    size_t payload = sb.size - 4;
    size_t tensor = (keys & KEY(K_DATA)) ? m->nbytes : 0;
    if (tensor > UINT32_MAX - payload) {
        msgpack_sbuffer_destroy(&sb);
        return mesh_errf(err, errlen, "%s: \"data\" has %zu bytes, a frame holds at most %zu",
                       tname, m->nbytes, (size_t)UINT32_MAX - payload);
    }
    payload += tensor;
    for (int i = 0; i < 4; i++)
        sb.data[i] = (char)(uint8_t)(payload >> (8 * i));
    *head_len = sb.size;
    *head = (uint8_t *)msgpack_sbuffer_release(&sb);
    return 0;
}

int mesh_decode_length(const uint8_t prefix[4], size_t max_frame, size_t *len, char *err,
                       size_t errlen)
{
    uint32_t n = (uint32_t)prefix[0] | (uint32_t)prefix[1] << 8 | (uint32_t)prefix[2] << 16 |
                 (uint32_t)prefix[3] << 24;
    *len = 0;
    if (!max_frame)
        max_frame = MESH_DEFAULT_MAX_FRAME;
    if (n == 0)
        return mesh_errf(err, errlen, "frame length is 0: every message is a non-empty map");
    if (n > max_frame)
        return mesh_errf(err, errlen, "frame of %" PRIu32 " bytes is over the limit of %zu",
                       n, max_frame);
    *len = n;
    return 0;
}

/* ---------------------------------------------------------------- decoder */

/* wire_decode.c — the frame codec's decoder (see mesh.h, docs/PROTOCOL.md and
 * wire.c, which holds the key table and the encoder): a small strict reader
 * of our own over the bytes rather than msgpack_unpack. A frame is
 * attacker-controlled input, and a reader that knows exactly which formats
 * may appear can bound every length against the bytes that are left,
 * allocates nothing and guarantees nothing follows the map, which is also
 * what a fuzzer exercises best. */
#include "mesh.h"
#include "mesh_internal.h"
#include "wire_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* A cursor over the payload. Every read first checks that the bytes are
 * there; `key` names what is being read, for the messages. Out-values are
 * initialised at their declarations only because gcc -O3 cannot see that
 * mesh_errf always returns -1 and warns they may be used uninitialised. */
typedef struct {
    const uint8_t *p, *end;
    const char *key;  /* the value being read, or NULL when reading the map itself */
    char *err;
    size_t errlen;
} reader;

static size_t left(const reader *r)
{
    return (size_t)(r->end - r->p);
}

static int need(reader *r, size_t n)
{
    if (left(r) >= n)
        return 0;
    if (r->key)
        return mesh_errf(r->err, r->errlen, "payload ends inside \"%s\"", r->key);
    return mesh_errf(r->err, r->errlen, "payload ends inside the map");
}

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* Reads an n-byte big-endian length or integer. */
static int read_len(reader *r, int n, uint64_t *out)
{
    if (need(r, (size_t)n))
        return -1;
    *out = be(r->p, n);
    r->p += n;
    return 0;
}

static const char *kind_name(uint8_t b)
{
    if (b <= 0x7f || b >= 0xe0 || (b >= 0xcc && b <= 0xd3))
        return "an integer";
    if (b <= 0x8f || b == 0xde || b == 0xdf)
        return "a map";
    if (b <= 0x9f || b == 0xdc || b == 0xdd)
        return "an array";
    if (b <= 0xbf || (b >= 0xd9 && b <= 0xdb))
        return "a string";
    switch (b) {
    case 0xc0: return "nil";
    case 0xc1: return "the never-used byte 0xc1";
    case 0xc2:
    case 0xc3: return "a boolean";
    case 0xc4:
    case 0xc5:
    case 0xc6: return "a bin";
    case 0xca:
    case 0xcb: return "a float";
    }
    return "an ext";
}

static int wrong_kind(reader *r, const char *want, uint8_t b)
{
    return mesh_errf(r->err, r->errlen, "\"%s\" must be %s, got %s", r->key, want,
                   kind_name(b));
}

/* An integer of any msgpack width, as sign and magnitude. */
typedef struct {
    int neg;
    uint64_t u;  /* when !neg */
    int64_t i;   /* when neg */
} wire_int;

static int read_int(reader *r, wire_int *v)
{
    if (need(r, 1))
        return -1;
    uint8_t b = *r->p;
    v->neg = 0;
    if (b <= 0x7f) {
        r->p++;
        v->u = b;
        return 0;
    }
    if (b >= 0xe0) {
        r->p++;
        v->neg = 1;
        v->i = (int8_t)b;
        return 0;
    }
    if (b >= 0xcc && b <= 0xcf) {
        int n = 1 << (b - 0xcc);
        r->p++;
        return read_len(r, n, &v->u);
    }
    if (b >= 0xd0 && b <= 0xd3) {
        int n = 1 << (b - 0xd0);
        uint64_t raw = 0;
        r->p++;
        if (read_len(r, n, &raw))
            return -1;
        /* Sign-extend the n-byte two's complement value. */
        int64_t s;
        switch (n) {
        case 1: s = (int8_t)(uint8_t)raw; break;
        case 2: s = (int16_t)(uint16_t)raw; break;
        case 4: s = (int32_t)(uint32_t)raw; break;
        default: s = (int64_t)raw; break;
        }
        if (s < 0)
            v->neg = 1, v->i = s;
        else
            v->u = (uint64_t)s;
        return 0;
    }
    return wrong_kind(r, "an integer", b);
}

/* Every integer field is a count or an id: non-negative, at most max. */
static int read_count(reader *r, uint64_t max, uint64_t *out)
{
    wire_int v = {0, 0, 0};
    if (read_int(r, &v))
        return -1;
    if (v.neg)
        return mesh_errf(r->err, r->errlen, "\"%s\" is negative (%" PRId64 ")", r->key, v.i);
    if (v.u > max)
        return mesh_errf(r->err, r->errlen, "\"%s\" is %" PRIu64 ", at most %" PRIu64, r->key,
                       v.u, max);
    *out = v.u;
    return 0;
}

static int read_float(reader *r, double *out)
{
    if (need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b != 0xca && b != 0xcb)
        return wrong_kind(r, "a float", b);
    r->p++;
    uint64_t raw = 0;
    if (read_len(r, b == 0xca ? 4 : 8, &raw))
        return -1;
    if (b == 0xca) {
        /* float32 from other encoders is accepted: it converts exactly. */
        uint32_t bits = (uint32_t)raw;
        float f;
        memcpy(&f, &bits, sizeof f);
        *out = f;
    } else {
        memcpy(out, &raw, sizeof *out);
    }
    return 0;
}

/* A str's header: its length, the bytes themselves still to be consumed. */
static int read_str_len(reader *r, uint64_t *len)
{
    if (need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b >= 0xa0 && b <= 0xbf) {
        r->p++;
        *len = b & 0x1f;
        return 0;
    }
    if (b >= 0xd9 && b <= 0xdb) {
        r->p++;
        return read_len(r, 1 << (b - 0xd9), len);
    }
    return wrong_kind(r, "a string", b);
}

static int read_str(reader *r, char *dst, size_t cap)
{
    uint64_t n = 0;
    if (read_str_len(r, &n))
        return -1;
    if (n > cap - 1)
        return mesh_errf(r->err, r->errlen, "\"%s\" is %" PRIu64 " bytes, at most %zu", r->key,
                       n, cap - 1);
    if (need(r, (size_t)n))
        return -1;
    /* C strings end at the first NUL: a name with one inside would be read
     * as another name. */
    if (memchr(r->p, 0, (size_t)n))
        return mesh_errf(r->err, r->errlen, "\"%s\" contains a NUL byte", r->key);
    memcpy(dst, r->p, (size_t)n);
    dst[n] = 0;
    r->p += n;
    return 0;
}

static int read_bin(reader *r, const void **ptr, size_t *len)
{
    if (need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b < 0xc4 || b > 0xc6)
        return wrong_kind(r, "a bin", b);
    r->p++;
    uint64_t n = 0;
    if (read_len(r, 1 << (b - 0xc4), &n) || need(r, (size_t)n))
        return -1;
    *ptr = r->p;
    *len = (size_t)n;
    r->p += n;
    return 0;
}

static int read_array_len(reader *r, uint64_t *len)
{
    if (need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b >= 0x90 && b <= 0x9f) {
        r->p++;
        *len = b & 0x0f;
        return 0;
    }
    if (b == 0xdc || b == 0xdd) {
        r->p++;
        return read_len(r, b == 0xdc ? 2 : 4, len);
    }
    return wrong_kind(r, "an array", b);
}

/* The map header; NULL key, so a wrong kind is reported about the payload. */
static int read_map_len(reader *r, uint64_t *len)
{
    if (need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b >= 0x80 && b <= 0x8f) {
        r->p++;
        *len = b & 0x0f;
        return 0;
    }
    if (b == 0xde || b == 0xdf) {
        r->p++;
        return read_len(r, b == 0xde ? 2 : 4, len);
    }
    return mesh_errf(r->err, r->errlen, "payload must be a msgpack map, got %s", kind_name(b));
}

/* Skips one value of any msgpack kind, for the version pre-scan only. Work is
 * bounded by the bytes (every element takes at least one) and the depth. */
static int skip_any(reader *r, int depth)
{
    if (depth > 32 || need(r, 1))
        return -1;
    uint8_t b = *r->p++;
    uint64_t n = 0, count = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        return 0;
    if (b <= 0x8f)
        count = 2 * (uint64_t)(b & 0x0f);
    else if (b <= 0x9f)
        count = b & 0x0f;
    else if (b <= 0xbf)
        n = b & 0x1f;
    else if (b >= 0xcc && b <= 0xcf)
        n = (uint64_t)1 << (b - 0xcc);
    else if (b >= 0xd0 && b <= 0xd3)
        n = (uint64_t)1 << (b - 0xd0);
    else if (b >= 0xd4 && b <= 0xd8)
        n = 1 + ((uint64_t)1 << (b - 0xd4)); /* fixext: type byte + data */
    else if (b == 0xca)
        n = 4;
    else if (b == 0xcb)
        n = 8;
    else if (b >= 0xc4 && b <= 0xc6) {
        if (read_len(r, 1 << (b - 0xc4), &n))
            return -1;
    } else if (b >= 0xc7 && b <= 0xc9) {
        if (read_len(r, 1 << (b - 0xc7), &n))
            return -1;
        n += 1; /* the ext type byte */
    } else if (b >= 0xd9 && b <= 0xdb) {
        if (read_len(r, 1 << (b - 0xd9), &n))
            return -1;
    } else if (b == 0xdc || b == 0xdd) {
        if (read_len(r, b == 0xdc ? 2 : 4, &count))
            return -1;
    } else if (b == 0xde || b == 0xdf) {
        if (read_len(r, b == 0xde ? 2 : 4, &count))
            return -1;
        count *= 2;
    } else {
        return -1; /* 0xc1 */
    }
    if (need(r, (size_t)n))
        return -1;
    r->p += n;
    for (uint64_t i = 0; i < count; i++)
        if (skip_any(r, depth + 1))
            return -1;
    return 0;
}

/* Looks for "v" before anything else is judged, so a node of another
 * protocol version is told so, not about a key or type it cannot know.
 * Returns 1 with *version when found as an integer; 0 otherwise (the strict
 * pass then says what is wrong). */
static int peek_version(const uint8_t *p, size_t len, uint64_t *version)
{
    reader r = {.p = p, .end = p + len};
    uint64_t n = 0;
    if (read_map_len(&r, &n))
        return 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t klen = 0;
        if (read_str_len(&r, &klen) || need(&r, (size_t)klen))
            return 0;
        int is_v = klen == 1 && r.p[0] == 'v';
        r.p += klen;
        if (is_v) {
            wire_int v = {0, 0, 0};
            if (read_int(&r, &v) || v.neg)
                return 0;
            *version = v.u;
            return 1;
        }
        if (skip_any(&r, 0))
            return 0;
    }
    return 0;
}

/* Quotes an unknown key for a message: printable ASCII only, cut short. */
static void quote_key(const uint8_t *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 4 < cap; i++)
        out[o++] = (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"') ? (char)s[i] : '?';
    if (o + 4 >= cap && n > o)
        out[o++] = '.', out[o++] = '.', out[o++] = '.';
    out[o] = 0;
}

static int read_key(reader *r, int *k)
{
    uint64_t n = 0;
    r->key = NULL;
    if (need(r, 1))
        return -1;
    if (r->p[0] < 0xa0 || (r->p[0] > 0xbf && (r->p[0] < 0xd9 || r->p[0] > 0xdb)))
        return mesh_errf(r->err, r->errlen, "map keys must be strings, got %s",
                       kind_name(r->p[0]));
    if (read_str_len(r, &n) || need(r, (size_t)n))
        return -1;
    for (int i = 0; i < K_COUNT; i++) {
        if (strlen(wire_key_names[i]) == n && memcmp(wire_key_names[i], r->p, (size_t)n) == 0) {
            r->p += n;
            *k = i;
            r->key = wire_key_names[i];
            return 0;
        }
    }
    char q[40];
    quote_key(r->p, (size_t)n, q, sizeof q);
    return mesh_errf(r->err, r->errlen, "unknown key \"%s\"", q);
}

static int read_shape(reader *r, mesh_msg *m)
{
    uint64_t n = 0, d = 0;
    if (read_array_len(r, &n))
        return -1;
    if (n > MESH_MAX_DIMS)
        return mesh_errf(r->err, r->errlen, "\"shape\" has %" PRIu64 " dims, at most %d", n,
                       MESH_MAX_DIMS);
    char name[16];
    for (uint64_t i = 0; i < n; i++) {
        snprintf(name, sizeof name, "shape[%d]", (int)i);
        r->key = name;
        if (read_count(r, INT64_MAX, &d))
            return -1;
        m->shape[i] = (int64_t)d;
    }
    r->key = wire_key_names[K_SHAPE];
    m->ndim = (int)n;
    return 0;
}

static int read_value(reader *r, int k, mesh_msg *m)
{
    uint64_t u = 0;
    switch (k) {
    case K_V:
        if (read_count(r, UINT64_MAX, &u))
            return -1;
        if (u != MESH_PROTOCOL_VERSION)
            return mesh_errf(r->err, r->errlen, "protocol version %" PRIu64 ", this node speaks %d",
                           u, MESH_PROTOCOL_VERSION);
        m->version = (uint32_t)u;
        return 0;
    case K_T:
        if (read_count(r, UINT64_MAX, &u))
            return -1;
        if (!wire_known_type(u))
            return mesh_errf(r->err, r->errlen, "\"t\" is %" PRIu64 ", not a message type", u);
        m->type = (mesh_msg_type)u;
        return 0;
    case K_RUN: return read_count(r, UINT64_MAX, &m->run_id);
    case K_EP:
        if (read_count(r, UINT32_MAX, &u))
            return -1;
        m->epoch = (uint32_t)u;
        return 0;
    case K_STEP:
        if (read_count(r, INT64_MAX, &u))
            return -1;
        m->step = (int64_t)u;
        return 0;
    case K_MB:
    case K_ST:
        if (read_count(r, INT32_MAX, &u))
            return -1;
        *(k == K_MB ? &m->micro : &m->stage) = (int32_t)u;
        return 0;
    case K_KEPT:
        if (read_count(r, INT64_MAX, &u))
            return -1;
        m->kept = (int64_t)u;
        return 0;
    case K_VAL: return read_float(r, &m->value);
    case K_FL:
        if (read_count(r, UINT32_MAX, &u))
            return -1;
        m->flags = (uint32_t)u;
        return 0;
    case K_NAME: return read_str(r, m->name, sizeof m->name);
    case K_TEXT: return read_str(r, m->text, sizeof m->text);
    case K_DT:
        if (read_count(r, UINT64_MAX, &u))
            return -1;
        if (u > MESH_I32)
            return mesh_errf(r->err, r->errlen,
                           "\"dt\" is %" PRIu64 ", not a dtype (0 f32, 1 bf16, 2 i32)", u);
        m->dtype = (mesh_dtype)u;
        return 0;
    case K_SHAPE: return read_shape(r, m);
    case K_LAB: {
        size_t n = 0;
        if (read_bin(r, &m->labels, &n))
            return -1;
        if (n % 4)
            return mesh_errf(r->err, r->errlen, "\"lab\" has %zu bytes, not a multiple of 4", n);
        m->nlabels = n / 4;
        return 0;
    }
    case K_DATA: return read_bin(r, &m->data, &m->nbytes);
    }
    return -1;
}

static int decode(const uint8_t *p, size_t len, mesh_msg *m, char *err, size_t errlen)
{
    if (len == 0)
        return mesh_errf(err, errlen, "empty payload");
    uint64_t version = 0;
    if (peek_version(p, len, &version) && version != MESH_PROTOCOL_VERSION)
        return mesh_errf(err, errlen, "protocol version %" PRIu64 ", this node speaks %d",
                       version, MESH_PROTOCOL_VERSION);

    reader r = {.p = p, .end = p + len, .err = err, .errlen = errlen};
    uint64_t n = 0;
    if (read_map_len(&r, &n))
        return -1;
    if (n > K_COUNT)
        return mesh_errf(err, errlen, "map has %" PRIu64 " keys, no message has more than %d", n,
                       K_COUNT);
    uint32_t seen = 0;
    for (uint64_t i = 0; i < n; i++) {
        int k = 0;
        if (read_key(&r, &k))
            return -1;
        if (seen & KEY(k))
            return mesh_errf(err, errlen, "duplicate key \"%s\"", wire_key_names[k]);
        seen |= KEY(k);
        if (read_value(&r, k, m))
            return -1;
    }
    if (r.p != r.end)
        return mesh_errf(err, errlen, "%zu trailing byte%s after the map", left(&r),
                       left(&r) == 1 ? "" : "s");
    if (!(seen & KEY(K_V)))
        return mesh_errf(err, errlen, "missing key \"v\"");
    if (!(seen & KEY(K_T)))
        return mesh_errf(err, errlen, "missing key \"t\"");

    uint32_t allowed = wire_type_keys(m->type);
    const char *tname = wire_type_name(m->type);
    for (int k = 0; k < K_COUNT; k++) {
        if ((seen & KEY(k)) && !(allowed & KEY(k)))
            return mesh_errf(err, errlen, "key \"%s\" is not allowed in %s", wire_key_names[k],
                           tname);
        if (!(seen & KEY(k)) && (allowed & KEY(k)))
            return mesh_errf(err, errlen, "%s is missing key \"%s\"", tname, wire_key_names[k]);
    }
    if ((allowed & KEY(K_DT)) &&
        wire_tensor_check(m->dtype, m->ndim, m->shape, m->nbytes, err, errlen))
        return -1;
    if ((allowed & KEY(K_KEPT)) && m->kept == 0)
        return mesh_errf(err, errlen, "%s: \"kept\" is 0: the loss is divided by it, and a "
                         "batch has at least one kept target", tname);
    /* Raw bytes (PROBE): bounded on their own. */
    if ((allowed & KEY(K_DATA)) && !(allowed & KEY(K_DT)) && m->nbytes > MESH_PROBE_MAX)
        return mesh_errf(err, errlen, "%s: \"data\" has %zu bytes, at most %zu", tname,
                       m->nbytes, MESH_PROBE_MAX);
    return 0;
}

int mesh_decode(const void *payload, size_t len, mesh_msg *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!payload)
        len = 0;
    /* On failure out is zeroed again: no half-filled message, no pointers
     * into a frame the caller is about to drop. */
    if (decode(payload, len, out, err, errlen)) {
        memset(out, 0, sizeof *out);
        return -1;
    }
    return 0;
}

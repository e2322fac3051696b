/* gossip_msgpack.c — the msgpack layer under the gossip codec, shared by
 * gossip_record.c (member records) and gossip_wire.c (messages): the cursor
 * and how its errors name the field at fault, the field rules both the
 * encoders and the decoders apply, packing into the caller's fixed buffer,
 * and a small strict reader that bounds every length against the bytes
 * left (see gossip_wire.c for why). Declared in gossip_wire_internal.h. */
#include "gossip_wire_internal.h"

#include "keys.h"
#include "mesh_internal.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

_Static_assert(MESH_WG_ENDPOINT_MAX == TOKEN_STR_MAX + 1,
               "endpoints follow the token's endpoint rule (token_endpoint_valid)");

/* ------------------------------------------------- cursor and messages */

int gossip_cerr(const gossip_cur *c, const char *fmt, ...)
{
    char what[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (c->key)
        return mesh_errf(c->err, c->errlen, "%s: field \"%s\": %s", c->ctx, c->key, what);
    return mesh_errf(c->err, c->errlen, "%s: %s", c->ctx, what);
}

void gossip_cur_init(gossip_cur *c, const void *p, size_t len, const char *ctx, char *err,
                     size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->p = p;
    c->end = c->p ? c->p + len : c->p;
    snprintf(c->ctx, sizeof c->ctx, "%s", ctx);
    c->err = err;
    c->errlen = errlen;
}

/* Points key at "ep[3]" or "up[3].s". */
void gossip_key_index(gossip_cur *c, const char *name, int i)
{
    snprintf(c->keybuf, sizeof c->keybuf, "%s[%d]", name, i);
    c->key = c->keybuf;
}

void gossip_key_in_update(gossip_cur *c, const char *name)
{
    snprintf(c->keybuf, sizeof c->keybuf, "%s.%s", c->base, name);
    c->key = c->keybuf;
}

/* Quotes text from the wire for a message: printable ASCII only, cut short. */
static void quote(const uint8_t *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 4 < cap; i++)
        out[o++] = (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"') ? (char)s[i] : '?';
    if (o + 4 >= cap && n > o)
        out[o++] = '.', out[o++] = '.', out[o++] = '.';
    out[o] = 0;
}

/* ---------------------------------------------------- the field rules */

/* Both sides apply these: the encoder to what it is given, the decoder to
 * what it read, so a node never sends what its peers must refuse. */

int gossip_judge_name(gossip_cur *c, const char *s)
{
    size_t n = strlen(s);
    int ok = n >= 1 && n < MESH_NAME_MAX;
    for (size_t i = 0; ok && i < n; i++) {
        char ch = s[i];
        ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
             ch == '.' || ch == '_' || ch == '-';
    }
    if (ok)
        return 0;
    char q[80];
    quote((const uint8_t *)s, n, q, sizeof q);
    return gossip_cerr(c, "\"%s\" is not a node name (1 to %d of A-Z a-z 0-9 . _ -)", q,
                       MESH_NAME_MAX - 1);
}

int gossip_judge_address(gossip_cur *c, const char *s)
{
    uint8_t raw[16];
    if (inet_pton(AF_INET, s, raw) == 1 || inet_pton(AF_INET6, s, raw) == 1)
        return 0;
    char q[80];
    quote((const uint8_t *)s, strlen(s), q, sizeof q);
    return gossip_cerr(c, "\"%s\" is not an IPv4 or IPv6 address", q);
}

int gossip_judge_endpoint(gossip_cur *c, const char *s, int empty_ok)
{
    if ((empty_ok && !s[0]) || token_endpoint_valid(s))
        return 0;
    char q[80];
    quote((const uint8_t *)s, strlen(s), q, sizeof q);
    return gossip_cerr(c, "\"%s\" is not an endpoint (host:port or [IPv6]:port)", q);
}

/* FETCH's path: 1 to GOSSIP_PATH_MAX - 1 bytes of printable ASCII. What
 * the path may name is the serving node's business. */
int gossip_judge_path(gossip_cur *c, const char *s)
{
    size_t n = strlen(s);
    int ok = n >= 1 && n < GOSSIP_PATH_MAX;
    for (size_t i = 0; ok && i < n; i++)
        ok = s[i] >= 0x20 && s[i] < 0x7f;
    if (ok)
        return 0;
    char q[80];
    quote((const uint8_t *)s, n, q, sizeof q);
    return gossip_cerr(c, "\"%s\" is not a path (1 to %d bytes of printable ASCII)", q,
                       GOSSIP_PATH_MAX - 1);
}

/* A FETCH_REPLY's part of the file: data_len bytes at offset within total. */
int gossip_judge_part(gossip_cur *c, uint64_t offset, size_t data_len, uint64_t total)
{
    if ((uint64_t)data_len > total || offset > total - (uint64_t)data_len)
        return gossip_cerr(c, "%zu bytes at offset %" PRIu64 " end past the file's %" PRIu64
                              " bytes (\"total\")",
                           data_len, offset, total);
    return 0;
}

/* A C string field of the caller's struct: it must end within its array. */
int gossip_check_str(gossip_cur *c, const char *s, size_t cap)
{
    if (!memchr(s, 0, cap))
        return gossip_cerr(c, "is longer than %zu bytes", cap - 1);
    return 0;
}

/* ---------------------------------------------------------------- packer */

int gossip_fixbuf_write(void *data, const char *b, size_t n)
{
    gossip_fixbuf *f = data;
    if (n && f->len <= f->cap && n <= f->cap - f->len)
        memcpy(f->buf + f->len, b, n);
    f->len += n;
    return 0;
}

int gossip_pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    return msgpack_pack_str(pk, n) | msgpack_pack_str_body(pk, s, n);
}

int gossip_pack_bin(msgpack_packer *pk, const void *p, size_t n)
{
    return msgpack_pack_bin(pk, n) | msgpack_pack_bin_body(pk, p, n);
}

/* ---------------------------------------------------------------- reader */

/* Every read first checks that the bytes are there. Out-values are
 * initialised at their declarations because gcc -O3 cannot see that cerr
 * always returns -1. */

size_t gossip_left(const gossip_cur *r)
{
    return (size_t)(r->end - r->p);
}

int gossip_need(gossip_cur *r, size_t n)
{
    if (gossip_left(r) >= n)
        return 0;
    return gossip_cerr(r, "the bytes end inside %s", r->key ? "it" : "the map");
}

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* An n-byte big-endian length or integer. */
int gossip_read_be(gossip_cur *r, int n, uint64_t *out)
{
    if (gossip_need(r, (size_t)n))
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

int gossip_wrong_kind(gossip_cur *r, const char *want, uint8_t b)
{
    return gossip_cerr(r, "expected %s, got %s", want, kind_name(b));
}

int gossip_read_int(gossip_cur *r, const char *want, gossip_wire_int *v)
{
    if (gossip_need(r, 1))
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
        r->p++;
        return gossip_read_be(r, 1 << (b - 0xcc), &v->u);
    }
    if (b >= 0xd0 && b <= 0xd3) {
        int n = 1 << (b - 0xd0);
        uint64_t raw = 0;
        r->p++;
        if (gossip_read_be(r, n, &raw))
            return -1;
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
    return gossip_wrong_kind(r, want, b);
}

int gossip_read_uint(gossip_cur *r, uint64_t min, uint64_t max, uint64_t *out)
{
    gossip_wire_int v = {0, 0, 0};
    if (gossip_read_int(r, "an unsigned integer", &v))
        return -1;
    if (v.neg)
        return gossip_cerr(r, "expected an unsigned integer, got %" PRId64, v.i);
    if (v.u < min || v.u > max)
        return gossip_cerr(r, "is %" PRIu64 ", expected %" PRIu64 " to %" PRIu64, v.u, min, max);
    *out = v.u;
    return 0;
}

int gossip_read_i64(gossip_cur *r, int64_t *out)
{
    gossip_wire_int v = {0, 0, 0};
    if (gossip_read_int(r, "an integer", &v))
        return -1;
    if (v.neg) {
        *out = v.i;
        return 0;
    }
    if (v.u > INT64_MAX)
        return gossip_cerr(r, "is %" PRIu64 ", at most %" PRId64, v.u, INT64_MAX);
    *out = (int64_t)v.u;
    return 0;
}

/* A boolean; with ints_too, the integers 0 and 1 as well. */
int gossip_read_bool(gossip_cur *r, int ints_too, uint8_t *out)
{
    if (gossip_need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b == 0xc2 || b == 0xc3) {
        r->p++;
        *out = b == 0xc3;
        return 0;
    }
    if (!ints_too)
        return gossip_wrong_kind(r, "a boolean", b);
    gossip_wire_int v = {0, 0, 0};
    if (gossip_read_int(r, "a boolean or 0/1", &v))
        return -1;
    if (v.neg || v.u > 1)
        return gossip_cerr(r, "expected a boolean or 0/1, got %s%" PRIu64, v.neg ? "-" : "",
                           v.neg ? (uint64_t)0 - (uint64_t)v.i : v.u);
    *out = (uint8_t)v.u;
    return 0;
}

/* A str's header: its length, the bytes themselves still to be consumed. */
int gossip_read_str_len(gossip_cur *r, uint64_t *len)
{
    if (gossip_need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b >= 0xa0 && b <= 0xbf) {
        r->p++;
        *len = b & 0x1f;
        return 0;
    }
    if (b >= 0xd9 && b <= 0xdb) {
        r->p++;
        return gossip_read_be(r, 1 << (b - 0xd9), len);
    }
    return gossip_wrong_kind(r, "a string", b);
}

int gossip_read_str(gossip_cur *r, char *dst, size_t cap)
{
    uint64_t n = 0;
    if (gossip_read_str_len(r, &n))
        return -1;
    if (n > cap - 1)
        return gossip_cerr(r, "is %" PRIu64 " bytes, at most %zu", n, cap - 1);
    if (gossip_need(r, (size_t)n))
        return -1;
    /* C strings end at the first NUL: a name with one inside would be read
     * as another name. */
    if (memchr(r->p, 0, (size_t)n))
        return gossip_cerr(r, "contains a NUL byte");
    memcpy(dst, r->p, (size_t)n);
    dst[n] = 0;
    r->p += n;
    return 0;
}

/* A bin of min..max bytes, copied into dst. */
int gossip_read_bin(gossip_cur *r, void *dst, size_t min, size_t max, size_t *len)
{
    if (gossip_need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b < 0xc4 || b > 0xc6)
        return gossip_wrong_kind(r, "a bin", b);
    r->p++;
    uint64_t n = 0;
    if (gossip_read_be(r, 1 << (b - 0xc4), &n))
        return -1;
    if (n < min || n > max) {
        if (min == max)
            return gossip_cerr(r, "is a bin of %" PRIu64 " bytes, expected %zu", n, min);
        return gossip_cerr(r, "is a bin of %" PRIu64 " bytes, expected %zu to %zu", n, min, max);
    }
    if (gossip_need(r, (size_t)n))
        return -1;
    memcpy(dst, r->p, (size_t)n);
    r->p += n;
    if (len)
        *len = (size_t)n;
    return 0;
}

int gossip_read_array_len(gossip_cur *r, uint64_t *len)
{
    if (gossip_need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b >= 0x90 && b <= 0x9f) {
        r->p++;
        *len = b & 0x0f;
        return 0;
    }
    if (b == 0xdc || b == 0xdd) {
        r->p++;
        return gossip_read_be(r, b == 0xdc ? 2 : 4, len);
    }
    return gossip_wrong_kind(r, "an array", b);
}

int gossip_read_map_len(gossip_cur *r, uint64_t *len)
{
    if (gossip_need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b >= 0x80 && b <= 0x8f) {
        r->p++;
        *len = b & 0x0f;
        return 0;
    }
    if (b == 0xde || b == 0xdf) {
        r->p++;
        return gossip_read_be(r, b == 0xde ? 2 : 4, len);
    }
    return gossip_wrong_kind(r, "a map", b);
}

/* A map key from names[0..count). `where` is the field the map is (NULL
 * for the top level), for the messages about the key itself. */
int gossip_read_key(gossip_cur *r, const char *const *names, int count, const char *where, int *k)
{
    uint64_t n = 0;
    r->key = where;
    if (gossip_need(r, 1))
        return -1;
    uint8_t b = *r->p;
    if (b < 0xa0 || (b > 0xbf && (b < 0xd9 || b > 0xdb)))
        return gossip_cerr(r, "map keys must be strings, got %s", kind_name(b));
    if (gossip_read_str_len(r, &n) || gossip_need(r, (size_t)n))
        return -1;
    for (int i = 0; i < count; i++) {
        if (strlen(names[i]) == n && memcmp(names[i], r->p, (size_t)n) == 0) {
            r->p += n;
            *k = i;
            if (where)
                gossip_key_in_update(r, names[i]);
            else
                r->key = names[i];
            return 0;
        }
    }
    char q[40];
    quote(r->p, (size_t)n, q, sizeof q);
    return gossip_cerr(r, "unknown key \"%s\"", q);
}

/* Skips one value of any msgpack kind, for the pre-scan only. Work is
 * bounded by the bytes (every element takes at least one) and the depth. */
int gossip_skip_any(gossip_cur *r, int depth)
{
    if (depth > 32 || gossip_left(r) < 1)
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
        if (gossip_read_be(r, 1 << (b - 0xc4), &n))
            return -1;
    } else if (b >= 0xc7 && b <= 0xc9) {
        if (gossip_read_be(r, 1 << (b - 0xc7), &n))
            return -1;
        n += 1; /* the ext type byte */
    } else if (b >= 0xd9 && b <= 0xdb) {
        if (gossip_read_be(r, 1 << (b - 0xd9), &n))
            return -1;
    } else if (b == 0xdc || b == 0xdd) {
        if (gossip_read_be(r, b == 0xdc ? 2 : 4, &count))
            return -1;
    } else if (b == 0xde || b == 0xdf) {
        if (gossip_read_be(r, b == 0xde ? 2 : 4, &count))
            return -1;
        count *= 2;
    } else {
        return -1; /* 0xc1 */
    }
    if (gossip_left(r) < n)
        return -1;
    r->p += n;
    for (uint64_t i = 0; i < count; i++)
        if (gossip_skip_any(r, depth + 1))
            return -1;
    return 0;
}

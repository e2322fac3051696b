/* b64.c — strict base64 (RFC 4648 §4) and base64url (§5) for keys/.
 * Written here rather than taken from OpenSSL because EVP_DecodeBlock skips
 * whitespace and ignores non-zero trailing bits: a token altered in its last
 * character would then decode to the same bytes and be accepted. */
#include "b64.h"

static const char STD[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char URL[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

size_t b64_encoded_len(size_t n, int url)
{
    if (url)
        return n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0);
    return (n + 2) / 3 * 4;
}

void b64_encode(const uint8_t *in, size_t n, int url, char *out)
{
    const char *a = url ? URL : STD;
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = a[v >> 18 & 63];
        out[o++] = a[v >> 12 & 63];
        out[o++] = a[v >> 6 & 63];
        out[o++] = a[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = a[v >> 18 & 63];
        out[o++] = a[v >> 12 & 63];
        if (!url) {
            out[o++] = '=';
            out[o++] = '=';
        }
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = a[v >> 18 & 63];
        out[o++] = a[v >> 12 & 63];
        out[o++] = a[v >> 6 & 63];
        if (!url)
            out[o++] = '=';
    }
    out[o] = '\0';
}

static int value_of(char c, int url)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == (url ? '-' : '+'))
        return 62;
    if (c == (url ? '_' : '/'))
        return 63;
    return -1;
}

int b64_decode(const char *in, size_t len, int url, uint8_t *out, size_t outcap,
               size_t *outlen, size_t *bad_pos, const char **why)
{
    size_t data = len; /* characters that carry bits */
    *bad_pos = 0;
    if (!url) {
        if (len % 4 != 0) {
            *bad_pos = len;
            *why = "length is not a multiple of 4";
            return -1;
        }
        if (data > 0 && in[data - 1] == '=')
            data--;
        if (data > 0 && in[data - 1] == '=')
            data--;
    }
    if (data % 4 == 1) {
        /* One character holds 6 bits: never a whole byte. */
        *bad_pos = data - 1;
        *why = "length leaves a dangling character";
        return -1;
    }
    size_t n = data / 4 * 3 + (data % 4 ? data % 4 - 1 : 0);
    if (n > outcap) {
        *bad_pos = len;
        *why = "too long";
        return -1;
    }
    uint32_t acc = 0;
    int bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < data; i++) {
        int v = value_of(in[i], url);
        if (v < 0) {
            *bad_pos = i;
            *why = "not a base64 character";
            return -1;
        }
        acc = (acc << 6 | (uint32_t)v) & 0xffffff;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) {
        *bad_pos = data - 1;
        *why = "last character has non-zero unused bits";
        return -1;
    }
    *outlen = o;
    return 0;
}

/* token.c — invite tokens: "snj1." + base64url (no padding) of a compact
 * binary record signed with the issuer's Ed25519 identity key. The byte
 * layout is docs/PROTOCOL.md, "Invite tokens".
 *
 * The decoder checks in an order chosen so that a token altered by one
 * character is reported as altered: the structure is parsed first with
 * only what is needed to find the signature (bounded lengths and counts),
 * then the signature is verified, and only then are the contents judged
 * (addresses, issuer, expiry). Any alteration that still parses thus fails
 * the signature, never a content check that would blame the issuer. */
#include "keys.h"

#include "b64.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>

#define TEXT_PREFIX "snj1."
#define TEXT_PREFIX_LEN 5
/* Domain separation: the signed message starts with this, so a signature
 * over a token can never be taken for a signature over a member record or
 * anything else the same identity key signs. */
#define SIGN_CONTEXT "shardnode-invite"
#define SIGN_CONTEXT_LEN 16
/* Largest binary token: version, mesh id, prefix (1 + 63), member count,
 * 4 members (32 + 32 + 1 + 63), expiry, secret, issuer, signature. */
#define BIN_MAX (1 + TOKEN_MESH_ID_LEN + 1 + TOKEN_STR_MAX + 1 + \
                 TOKEN_MAX_MEMBERS * (2 * KEYS_LEN + 1 + TOKEN_STR_MAX) + 8 + \
                 TOKEN_SECRET_LEN + KEYS_LEN + KEYS_SIG_LEN)

_Static_assert(TEXT_PREFIX_LEN + (BIN_MAX + 2) / 3 * 4 < TOKEN_TEXT_MAX,
               "TOKEN_TEXT_MAX must hold the longest token");

/* ---- content checks, shared by encode and decode ---- */

static int printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f)
            return 0;
    return 1;
}

/* "a.b.c.d/n" or "v6/n" with no host bits set. */
static int valid_prefix(const char *p)
{
    const char *slash = strchr(p, '/');
    if (!slash || slash == p || slash - p > 45)
        return 0;
    char addr[46];
    memcpy(addr, p, (size_t)(slash - p));
    addr[slash - p] = '\0';
    const char *d = slash + 1;
    int bits = 0;
    if (!*d || strlen(d) > 3 || (d[0] == '0' && d[1]))
        return 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9')
            return 0;
        bits = bits * 10 + (*d - '0');
    }
    unsigned char raw[16];
    int nbytes;
    if (inet_pton(AF_INET, addr, raw) == 1)
        nbytes = 4;
    else if (inet_pton(AF_INET6, addr, raw) == 1)
        nbytes = 16;
    else
        return 0;
    if (bits > nbytes * 8)
        return 0;
    for (int i = 0; i < nbytes; i++) {
        int keep = bits - i * 8; /* prefix bits within this byte */
        unsigned mask = keep >= 8 ? 0xff : keep <= 0 ? 0 : (0xff00u >> keep) & 0xff;
        if (raw[i] & ~mask & 0xff)
            return 0;
    }
    return 1;
}

int token_endpoint_valid(const char *e)
{
    if (strlen(e) > TOKEN_STR_MAX) return 0;
    const char *colon = strrchr(e, ':');
    if (!colon || colon == e)
        return 0;
    const char *port = colon + 1;
    size_t plen = strlen(port);
    if (plen == 0 || plen > 5 || port[0] == '0')
        return 0;
    long v = 0;
    for (const char *c = port; *c; c++) {
        if (*c < '0' || *c > '9')
            return 0;
        v = v * 10 + (*c - '0');
    }
    if (v > 65535)
        return 0;
    size_t hlen = (size_t)(colon - e);
    if (e[0] == '[') {
        if (hlen < 3 || e[hlen - 1] != ']' || hlen - 2 > 45)
            return 0;
        char addr[46];
        unsigned char raw[16];
        memcpy(addr, e + 1, hlen - 2);
        addr[hlen - 2] = '\0';
        return inet_pton(AF_INET6, addr, raw) == 1;
    }
    for (size_t i = 0; i < hlen; i++) {
        char c = e[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

static int check_contents(const struct token *t, char *err, size_t errlen)
{
    if (t->nmembers < 1 || t->nmembers > TOKEN_MAX_MEMBERS)
        return keys_errf(err, errlen, "token: %d members, expected 1 to %d", t->nmembers,
                    TOKEN_MAX_MEMBERS);
    if (strnlen(t->prefix, sizeof t->prefix) == sizeof t->prefix || !printable(t->prefix) ||
        !valid_prefix(t->prefix))
        return keys_errf(err, errlen, "token: prefix \"%.63s\" is not an IPv4 or IPv6 prefix "
                    "like 10.77.0.0/16", t->prefix);
    int issuer_found = 0;
    for (int i = 0; i < t->nmembers; i++) {
        const struct token_member *m = &t->members[i];
        if (strnlen(m->endpoint, sizeof m->endpoint) == sizeof m->endpoint ||
            !printable(m->endpoint) || !token_endpoint_valid(m->endpoint))
            return keys_errf(err, errlen, "token: member %d endpoint \"%.63s\" is not host:port "
                        "or [v6]:port", i + 1, m->endpoint);
        if (memcmp(m->id_pub, t->issuer_id_pub, KEYS_LEN) == 0)
            issuer_found = 1;
    }
    /* The joiner redeems the secret with the issuer, and trusts the token
     * only as far as it trusts the issuer: it must be a member it names. */
    if (!issuer_found)
        return keys_errf(err, errlen, "token: the issuer's identity key is not one of its members'");
    return 0;
}

/* ---- binary layout ---- */

static size_t put_bytes(uint8_t *b, size_t o, const void *p, size_t n)
{
    memcpy(b + o, p, n);
    return o + n;
}

static size_t put_str(uint8_t *b, size_t o, const char *s)
{
    size_t n = strlen(s);
    b[o++] = (uint8_t)n;
    return put_bytes(b, o, s, n);
}

/* The signed message: context string, then the token bytes before the signature. */
static int sig_message(const uint8_t *bin, size_t n, uint8_t *msg)
{
    memcpy(msg, SIGN_CONTEXT, SIGN_CONTEXT_LEN);
    memcpy(msg + SIGN_CONTEXT_LEN, bin, n);
    return 0;
}

int token_encode(struct token *t, const uint8_t issuer_id_priv[KEYS_LEN], char *out,
                 size_t outlen, char *err, size_t errlen)
{
    t->version = TOKEN_VERSION;
    if (keys_ed25519_public(issuer_id_priv, t->issuer_id_pub, err, errlen) != 0)
        return -1;
    if (check_contents(t, err, errlen) != 0)
        return -1;
    uint8_t bin[BIN_MAX];
    size_t o = 0;
    bin[o++] = t->version;
    o = put_bytes(bin, o, t->mesh_id, TOKEN_MESH_ID_LEN);
    o = put_str(bin, o, t->prefix);
    bin[o++] = (uint8_t)t->nmembers;
    for (int i = 0; i < t->nmembers; i++) {
        o = put_bytes(bin, o, t->members[i].wg_pub, KEYS_LEN);
        o = put_bytes(bin, o, t->members[i].id_pub, KEYS_LEN);
        o = put_str(bin, o, t->members[i].endpoint);
    }
    uint64_t ex = (uint64_t)t->expires_unix;
    for (int i = 0; i < 8; i++)
        bin[o++] = (uint8_t)(ex >> (8 * i));
    o = put_bytes(bin, o, t->secret, TOKEN_SECRET_LEN);
    o = put_bytes(bin, o, t->issuer_id_pub, KEYS_LEN);
    uint8_t msg[SIGN_CONTEXT_LEN + BIN_MAX];
    sig_message(bin, o, msg);
    if (keys_sign(issuer_id_priv, msg, SIGN_CONTEXT_LEN + o, t->sig, err, errlen) != 0)
        return -1;
    o = put_bytes(bin, o, t->sig, KEYS_SIG_LEN);
    size_t need = TEXT_PREFIX_LEN + b64_encoded_len(o, 1) + 1;
    if (outlen < need)
        return keys_errf(err, errlen, "token: needs %zu bytes of output, given %zu", need, outlen);
    memcpy(out, TEXT_PREFIX, TEXT_PREFIX_LEN);
    b64_encode(bin, o, 1, out + TEXT_PREFIX_LEN);
    return 0;
}

/* A bounded reader over the decoded bytes: every take names what it reads,
 * so a short token says where it ends. */
struct reader {
    const uint8_t *b;
    size_t n, o;
    const char *short_at; /* first field that did not fit */
};

static const uint8_t *take(struct reader *r, size_t n, const char *what)
{
    if (r->short_at)
        return NULL;
    if (r->n - r->o < n) {
        r->short_at = what;
        return NULL;
    }
    const uint8_t *p = r->b + r->o;
    r->o += n;
    return p;
}

static void format_ago(int64_t secs, char *buf, size_t len)
{
    if (secs < 120)
        snprintf(buf, len, "%lld s", (long long)secs);
    else if (secs < 2 * 3600)
        snprintf(buf, len, "%lld min", (long long)(secs / 60));
    else if (secs < 2 * 86400)
        snprintf(buf, len, "%lld h", (long long)(secs / 3600));
    else
        snprintf(buf, len, "%lld days", (long long)(secs / 86400));
}

static int parse_str(struct reader *r, char *dst, const char *what, char *err, size_t errlen)
{
    const uint8_t *lp = take(r, 1, what);
    if (!lp)
        return 0; /* reported once, by the caller, as truncation */
    if (*lp == 0 || *lp > TOKEN_STR_MAX)
        return keys_errf(err, errlen, "token is malformed (altered or truncated?): %s length %u, "
                    "expected 1 to %d", what, *lp, TOKEN_STR_MAX);
    const uint8_t *s = take(r, *lp, what);
    if (!s)
        return 0;
    /* A NUL inside would cut the C string short and hide the rest from
     * check_contents, which runs after the signature: mark the string with
     * a control character, which check_contents refuses as not printable. */
    memcpy(dst, s, *lp);
    dst[*lp] = '\0';
    if (memchr(s, '\0', *lp))
        dst[0] = '\x01';
    return 0;
}

int token_decode(const char *text, struct token *t, int64_t now_unix, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    if (!text)
        return keys_errf(err, errlen, "token: none given");
    size_t len = strnlen(text, TOKEN_TEXT_MAX);
    if (len == TOKEN_TEXT_MAX)
        return keys_errf(err, errlen, "token: longer than %d characters, no token is",
                    TOKEN_TEXT_MAX - 1);
    if (strncmp(text, TEXT_PREFIX, TEXT_PREFIX_LEN) != 0) {
        /* Say "unsupported version" when it looks like a token of another
         * version, so an old node asked to join a newer mesh says why. */
        if (strncmp(text, "snj", 3) == 0 && text[3] >= '0' && text[3] <= '9') {
            size_t d = 3;
            while (d < len && d < 8 && text[d] >= '0' && text[d] <= '9')
                d++;
            if (text[d] == '.')
                return keys_errf(err, errlen, "token version %.*s is not supported (this node "
                            "reads version %d)", (int)(d - 3), text + 3, TOKEN_VERSION);
        }
        return keys_errf(err, errlen, "not an invite token: it does not start with \"%s\"",
                    TEXT_PREFIX);
    }
    uint8_t bin[BIN_MAX + 3];
    size_t n = 0, pos;
    const char *why;
    const char *body = text + TEXT_PREFIX_LEN;
    if (b64_decode(body, len - TEXT_PREFIX_LEN, 1, bin, sizeof bin, &n, &pos, &why) != 0) {
        if (strcmp(why, "too long") == 0)
            return keys_errf(err, errlen, "token: longer than any valid token");
        if (strcmp(why, "last character has non-zero unused bits") == 0)
            return keys_errf(err, errlen, "token is altered: character %zu has bits set that no "
                        "encoder writes", TEXT_PREFIX_LEN + pos + 1);
        if (strcmp(why, "not a base64 character") == 0)
            return keys_errf(err, errlen, "token: character %zu (0x%02x) is not base64url",
                        TEXT_PREFIX_LEN + pos + 1, (unsigned char)body[pos]);
        return keys_errf(err, errlen, "token is truncated: %s", why);
    }

    struct reader r = {bin, n, 0, NULL};
    const uint8_t *p = take(&r, 1, "version");
    if (p && *p != TOKEN_VERSION)
        return keys_errf(err, errlen, "token is altered: its version byte is %u but its text "
                    "says %s", *p, TEXT_PREFIX);
    t->version = TOKEN_VERSION;
    if ((p = take(&r, TOKEN_MESH_ID_LEN, "mesh id")))
        memcpy(t->mesh_id, p, TOKEN_MESH_ID_LEN);
    if (parse_str(&r, t->prefix, "prefix", err, errlen) != 0)
        return -1;
    if ((p = take(&r, 1, "member count"))) {
        if (*p > TOKEN_MAX_MEMBERS)
            return keys_errf(err, errlen, "token lists %u members, at most %d are allowed", *p,
                        TOKEN_MAX_MEMBERS);
        t->nmembers = *p;
    }
    for (int i = 0; i < t->nmembers && !r.short_at; i++) {
        struct token_member *m = &t->members[i];
        static const char *const names[TOKEN_MAX_MEMBERS] = {
            "member 1's endpoint", "member 2's endpoint", "member 3's endpoint",
            "member 4's endpoint"};
        if ((p = take(&r, KEYS_LEN, "a member's WireGuard key")))
            memcpy(m->wg_pub, p, KEYS_LEN);
        if ((p = take(&r, KEYS_LEN, "a member's identity key")))
            memcpy(m->id_pub, p, KEYS_LEN);
        if (parse_str(&r, m->endpoint, names[i], err, errlen) != 0)
            return -1;
    }
    if ((p = take(&r, 8, "expiry"))) {
        uint64_t ex = 0;
        for (int i = 0; i < 8; i++)
            ex |= (uint64_t)p[i] << (8 * i);
        t->expires_unix = (int64_t)ex;
    }
    if ((p = take(&r, TOKEN_SECRET_LEN, "secret")))
        memcpy(t->secret, p, TOKEN_SECRET_LEN);
    if ((p = take(&r, KEYS_LEN, "issuer key")))
        memcpy(t->issuer_id_pub, p, KEYS_LEN);
    size_t signed_len = r.o;
    if ((p = take(&r, KEYS_SIG_LEN, "signature")))
        memcpy(t->sig, p, KEYS_SIG_LEN);
    if (r.short_at)
        return keys_errf(err, errlen, "token is truncated (or altered): it ends inside its %s",
                    r.short_at);
    if (r.o != n)
        return keys_errf(err, errlen, "token is malformed (altered?): %zu bytes follow its "
                    "signature", n - r.o);

    uint8_t msg[SIGN_CONTEXT_LEN + BIN_MAX];
    sig_message(bin, signed_len, msg);
    if (!keys_verify(t->issuer_id_pub, msg, SIGN_CONTEXT_LEN + signed_len, t->sig))
        return keys_errf(err, errlen, "token signature does not verify: it was altered or truncated");

    if (check_contents(t, err, errlen) != 0)
        return -1;
    if (now_unix >= t->expires_unix) {
        time_t ex = (time_t)t->expires_unix;
        struct tm tm;
        char when[64] = "an unrepresentable time", ago[32];
        if (gmtime_r(&ex, &tm))
            strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
        /* Subtract in unsigned arithmetic: both are arbitrary int64. */
        uint64_t d = (uint64_t)now_unix - (uint64_t)t->expires_unix;
        format_ago(d > INT64_MAX ? INT64_MAX : (int64_t)d, ago, sizeof ago);
        return keys_errf(err, errlen, "token expired %s, %s ago", when, ago);
    }
    return 0;
}

int token_secret_used(const struct token *t, const uint8_t (*used)[TOKEN_SECRET_LEN], size_t n)
{
    int found = 0;
    /* No early exit and a constant-time compare: how long the check takes
     * says nothing about which secrets are recorded. */
    for (size_t i = 0; i < n; i++)
        found |= CRYPTO_memcmp(t->secret, used[i], TOKEN_SECRET_LEN) == 0;
    return found;
}

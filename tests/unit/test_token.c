/* test_token.c — invite tokens: the documented byte layout, round trips,
 * and refusals (every one-character alteration, expiry, prefix and
 * version, truncation, member count, contents). */
#include "b64.h" /* keys/ internal: to build and take apart token bytes */
#include "check.h"
#include "keys.h"

#include <stdlib.h>
#include <string.h>

#define EXPIRES 1795341600 /* 2026-11-22 10:00:00 UTC */

static const char URL_ALPHABET[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static uint8_t issuer_priv[32], issuer_pub[32], other_priv[32], other_pub[32];

static void make_token(struct token *t)
{
    char err[256];
    memset(t, 0, sizeof *t);
    for (int i = 0; i < 16; i++)
        t->mesh_id[i] = (uint8_t)(0xa0 + i), t->secret[i] = (uint8_t)(0x10 + i);
    strcpy(t->prefix, "10.77.0.0/16");
    t->nmembers = 2;
    uint8_t wg_priv[32];
    CHECK(keys_x25519_generate(wg_priv, t->members[0].wg_pub, err, sizeof err) == 0, "%s", err);
    memcpy(t->members[0].id_pub, issuer_pub, 32);
    strcpy(t->members[0].endpoint, "203.0.113.7:51820");
    memset(t->members[1].wg_pub, 0x42, 32);
    memcpy(t->members[1].id_pub, other_pub, 32);
    strcpy(t->members[1].endpoint, "[2001:db8::1]:51820");
    t->expires_unix = EXPIRES;
}

static int same_token(const struct token *a, const struct token *b)
{
    if (a->version != b->version || memcmp(a->mesh_id, b->mesh_id, 16) ||
        strcmp(a->prefix, b->prefix) || a->nmembers != b->nmembers ||
        a->expires_unix != b->expires_unix || memcmp(a->secret, b->secret, 16) ||
        memcmp(a->issuer_id_pub, b->issuer_id_pub, 32) || memcmp(a->sig, b->sig, 64))
        return 0;
    for (int i = 0; i < a->nmembers; i++)
        if (memcmp(a->members[i].wg_pub, b->members[i].wg_pub, 32) ||
            memcmp(a->members[i].id_pub, b->members[i].id_pub, 32) ||
            strcmp(a->members[i].endpoint, b->members[i].endpoint))
            return 0;
    return 1;
}

/* The layout of docs/PROTOCOL.md "Invite tokens", written out independently
 * of token.c, without the signature. */
static size_t layout(const struct token *t, uint8_t *b)
{
    size_t o = 0;
    b[o++] = 1;
    memcpy(b + o, t->mesh_id, 16), o += 16;
    b[o++] = (uint8_t)strlen(t->prefix);
    memcpy(b + o, t->prefix, strlen(t->prefix)), o += strlen(t->prefix);
    b[o++] = (uint8_t)t->nmembers;
    for (int i = 0; i < t->nmembers; i++) {
        memcpy(b + o, t->members[i].wg_pub, 32), o += 32;
        memcpy(b + o, t->members[i].id_pub, 32), o += 32;
        size_t n = strlen(t->members[i].endpoint);
        b[o++] = (uint8_t)n;
        memcpy(b + o, t->members[i].endpoint, n), o += n;
    }
    for (int i = 0; i < 8; i++)
        b[o++] = (uint8_t)((uint64_t)t->expires_unix >> (8 * i));
    memcpy(b + o, t->secret, 16), o += 16;
    memcpy(b + o, t->issuer_id_pub, 32), o += 32;
    return o;
}

/* Signs b[0..n) as the documented message ("shardnode-invite" + bytes),
 * appends the signature and writes the token text. */
static void sign_and_text(uint8_t *b, size_t n, const uint8_t priv[32], char *text)
{
    uint8_t msg[2048];
    char err[256];
    memcpy(msg, "shardnode-invite", 16);
    memcpy(msg + 16, b, n);
    CHECK(keys_sign(priv, msg, 16 + n, b + n, err, sizeof err) == 0, "%s", err);
    memcpy(text, "snj1.", 5);
    b64_encode(b, n + 64, 1, text + 5);
}

static size_t text_to_bin(const char *text, uint8_t *b, size_t cap)
{
    size_t n = 0, pos;
    const char *why;
    CHECK(b64_decode(text + 5, strlen(text + 5), 1, b, cap, &n, &pos, &why) == 0,
          "own token does not decode: %s", why);
    return n;
}

static void test_round_trip_and_layout(void)
{
    struct token t, back;
    char text[TOKEN_TEXT_MAX], err[256];
    make_token(&t);
    CHECK(token_encode(&t, issuer_priv, text, sizeof text, err, sizeof err) == 0, "%s", err);
    CHECK(strncmp(text, "snj1.", 5) == 0 && strspn(text + 5, URL_ALPHABET) == strlen(text + 5),
          "token text %s", text);
    CHECK(memcmp(t.issuer_id_pub, issuer_pub, 32) == 0 && t.version == 1, "issuer not filled in");
    CHECK(token_decode(text, &back, EXPIRES - 1, err, sizeof err) == 0, "%s", err);
    CHECK(same_token(&t, &back), "decoded token differs");

    /* The bytes are those the documentation describes. */
    uint8_t want[1024];
    char want_text[TOKEN_TEXT_MAX];
    size_t n = layout(&t, want);
    sign_and_text(want, n, issuer_priv, want_text);
    CHECK(strcmp(text, want_text) == 0, "token bytes differ from docs/PROTOCOL.md's layout");

    /* The largest token: 4 members with 63-character endpoints, IPv6 prefix. */
    strcpy(t.prefix, "fd00:1234:5678:9abc::/64");
    t.nmembers = 4;
    for (int i = 0; i < 4; i++) {
        memset(t.members[i].endpoint, 'h', 63);
        memcpy(t.members[i].endpoint + 57, ":51820", 7);
        t.members[i].endpoint[0] = (char)('a' + i);
    }
    memcpy(t.members[3].id_pub, issuer_pub, 32);
    memcpy(t.members[0].id_pub, other_pub, 32);
    CHECK(token_encode(&t, issuer_priv, text, sizeof text, err, sizeof err) == 0, "%s", err);
    CHECK(token_decode(text, &back, EXPIRES - 1, err, sizeof err) == 0, "%s", err);
    CHECK(same_token(&t, &back), "4-member token differs");
    CHECK(token_encode(&t, issuer_priv, text, 100, err, sizeof err) == -1, "small buffer accepted");

    /* A different issuer makes a different, still valid token. */
    make_token(&t);
    CHECK(token_encode(&t, other_priv, text, sizeof text, err, sizeof err) == 0, "%s", err);
    CHECK(token_decode(text, &back, 0, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(back.issuer_id_pub, other_pub, 32) == 0, "issuer is not member 2");
}

static void test_every_alteration(void)
{
    struct token t, back;
    char text[TOKEN_TEXT_MAX], alt[TOKEN_TEXT_MAX], err[256];
    make_token(&t);
    CHECK(token_encode(&t, issuer_priv, text, sizeof text, err, sizeof err) == 0, "%s", err);
    size_t len = strlen(text);
    int tried = 0, accepted = 0, signature = 0, altered = 0;
    for (size_t i = 0; i < len; i++) {
        for (const char *c = URL_ALPHABET; *c; c++) {
            if (*c == text[i])
                continue;
            memcpy(alt, text, len + 1);
            alt[i] = *c;
            tried++;
            err[0] = '\0';
            if (token_decode(alt, &back, EXPIRES - 1, err, sizeof err) == 0) {
                accepted++;
                CHECK(0, "token with character %zu changed to '%c' accepted", i + 1, *c);
                continue;
            }
            CHECK(err[0] != '\0', "refusal without a message");
            signature += strcmp(err, "token signature does not verify: it was altered or "
                                     "truncated") == 0;
            altered += strstr(err, "altered") != NULL;
        }
    }
    printf("test_token: %d one-character alterations, %d refused for the signature, "
           "%d say altered\n", tried, signature, altered);
    CHECK(accepted == 0, "%d alterations accepted", accepted);
    /* Only the "snj1." text prefix (5 of ~330 characters) and the few
     * length and count bytes can fail before the signature is checked. */
    CHECK(signature * 100 >= tried * 90, "only %d of %d refused for the signature", signature,
          tried);
    CHECK(altered * 100 >= tried * 97, "only %d of %d say altered", altered, tried);
}

static void test_expiry(void)
{
    struct token t, back;
    char text[TOKEN_TEXT_MAX], err[256];
    make_token(&t);
    CHECK(token_encode(&t, issuer_priv, text, sizeof text, err, sizeof err) == 0, "%s", err);
    CHECK(token_decode(text, &back, EXPIRES + 3 * 3600, err, sizeof err) == -1, "expired accepted");
    CHECK(strcmp(err, "token expired 2026-11-22 10:00:00 UTC, 3 h ago") == 0, "message: %s", err);
    CHECK(token_decode(text, &back, EXPIRES, err, sizeof err) == -1 &&
          strcmp(err, "token expired 2026-11-22 10:00:00 UTC, 0 s ago") == 0, "at expiry: %s",
          err);
    CHECK(token_decode(text, &back, EXPIRES + 5 * 86400 + 7, err, sizeof err) == -1 &&
          strstr(err, "5 days ago"), "days: %s", err);
    CHECK(token_decode(text, &back, EXPIRES + 600, err, sizeof err) == -1 &&
          strstr(err, "10 min ago"), "minutes: %s", err);
    CHECK(token_decode(text, &back, EXPIRES - 1, err, sizeof err) == 0, "%s", err);
    /* Extreme expiries encode and decode without overflow. */
    t.expires_unix = INT64_MIN;
    CHECK(token_encode(&t, issuer_priv, text, sizeof text, err, sizeof err) == 0, "%s", err);
    CHECK(token_decode(text, &back, INT64_MAX, err, sizeof err) == -1 &&
          strncmp(err, "token expired", 13) == 0, "INT64_MIN expiry: %s", err);
    t.expires_unix = INT64_MAX;
    CHECK(token_encode(&t, issuer_priv, text, sizeof text, err, sizeof err) == 0, "%s", err);
    CHECK(token_decode(text, &back, EXPIRES, err, sizeof err) == 0, "INT64_MAX expiry: %s", err);
}

static void test_prefix_and_truncation(void)
{
    struct token t, back;
    char text[TOKEN_TEXT_MAX], alt[TOKEN_TEXT_MAX + 8], err[256];
    make_token(&t);
    CHECK(token_encode(&t, issuer_priv, text, sizeof text, err, sizeof err) == 0, "%s", err);
    size_t len = strlen(text);

    snprintf(alt, sizeof alt, "snj2.%s", text + 5);
    CHECK(token_decode(alt, &back, 0, err, sizeof err) == -1 &&
          strcmp(err, "token version 2 is not supported (this node reads version 1)") == 0,
          "snj2: %s", err);
    snprintf(alt, sizeof alt, "snj17.%s", text + 5);
    CHECK(token_decode(alt, &back, 0, err, sizeof err) == -1 && strstr(err, "version 17"),
          "snj17: %s", err);
    static const char *const not_tokens[] = {"", "snj", "snj1", "SNJ1.AAAA", "xyz.AAAA",
                                             "snjx.AAAA", " snj1.AAAA"};
    for (size_t i = 0; i < sizeof not_tokens / sizeof *not_tokens; i++)
        CHECK(token_decode(not_tokens[i], &back, 0, err, sizeof err) == -1 &&
              strstr(err, "not an invite token"), "\"%s\": %s", not_tokens[i], err);
    CHECK(token_decode(NULL, &back, 0, err, sizeof err) == -1, "NULL accepted");

    /* Every truncation is refused, and says so (or that it was altered:
     * a cut can leave a last character whose unused bits are set). */
    for (size_t cut = 0; cut < len; cut++) {
        memcpy(alt, text, cut);
        alt[cut] = '\0';
        CHECK(token_decode(alt, &back, 0, err, sizeof err) == -1, "cut at %zu accepted", cut);
        if (cut > 5)
            CHECK(strstr(err, "truncated") || strstr(err, "altered"), "cut at %zu: %s", cut,
                  err);
    }
    /* Appended characters, and whitespace a paste may add. */
    snprintf(alt, sizeof alt, "%sAAAA", text);
    CHECK(token_decode(alt, &back, 0, err, sizeof err) == -1 && strstr(err, "follow"),
          "appended: %s", err);
    snprintf(alt, sizeof alt, "%s\n", text);
    CHECK(token_decode(alt, &back, 0, err, sizeof err) == -1 && strstr(err, "not base64url"),
          "newline: %s", err);
    char huge[TOKEN_TEXT_MAX + 100];
    memset(huge, 'A', sizeof huge - 1);
    memcpy(huge, "snj1.", 5);
    huge[sizeof huge - 1] = '\0';
    CHECK(token_decode(huge, &back, 0, err, sizeof err) == -1 && strstr(err, "longer"),
          "huge: %s", err);
    huge[TOKEN_TEXT_MAX - 2] = '\0'; /* under the text bound, over the byte bound */
    CHECK(token_decode(huge, &back, 0, err, sizeof err) == -1, "long accepted");
}

static void test_structure(void)
{
    struct token t, back;
    char text[TOKEN_TEXT_MAX], err[256];
    uint8_t b[1024];
    make_token(&t);
    if (token_encode(&t, issuer_priv, text, sizeof text, err, sizeof err) != 0) {
        CHECK(0, "%s", err);
        return;
    }
    size_t n = text_to_bin(text, b, sizeof b);
    if (n < 200)
        return; /* reported by text_to_bin */
    size_t count_at = 1 + 16 + 1 + strlen(t.prefix);
    CHECK(b[count_at] == 2, "member count not at byte %zu", count_at);

    /* Member counts over the limit, signed properly: refused before any
     * member is read. */
    for (int count = 5; count <= 255; count += 250) {
        b[count_at] = (uint8_t)count;
        sign_and_text(b, n - 64, issuer_priv, text);
        CHECK(token_decode(text, &back, 0, err, sizeof err) == -1 && strstr(err, "at most 4"),
              "%d members: %s", count, err);
    }
    /* Zero members parses, then fails the content check. */
    uint8_t z[1024];
    size_t zn = 0;
    memcpy(z, b, count_at), zn = count_at;
    z[zn++] = 0;
    size_t tail = 8 + 16 + 32;
    size_t tail_at = n - 64 - tail;
    memcpy(z + zn, b + tail_at, tail), zn += tail;
    sign_and_text(z, zn, issuer_priv, text);
    CHECK(token_decode(text, &back, 0, err, sizeof err) == -1 && strstr(err, "0 members"),
          "no members: %s", err);

    /* Version byte 2 under the snj1 text. */
    b[count_at] = 2;
    b[0] = 2;
    sign_and_text(b, n - 64, issuer_priv, text);
    CHECK(token_decode(text, &back, 0, err, sizeof err) == -1 && strstr(err, "version byte"),
          "version byte: %s", err);
    b[0] = 1;

    /* Prefix lengths 0 and 64 are out of bounds. */
    for (int l = 0; l <= 64; l += 64) {
        b[17] = (uint8_t)l;
        sign_and_text(b, n - 64, issuer_priv, text);
        CHECK(token_decode(text, &back, 0, err, sizeof err) == -1 && strstr(err, "prefix length"),
              "prefix length %d: %s", l, err);
    }
    b[17] = (uint8_t)strlen(t.prefix);

    /* Correctly signed but bad contents: a NUL inside an endpoint, a control
     * character in the prefix, an issuer who is not a member, a bad CIDR. */
    struct token c;
    make_token(&c);
    memcpy(c.issuer_id_pub, issuer_pub, 32);
    size_t cn = layout(&c, b);
    size_t ep = 1 + 16 + 1 + strlen(c.prefix) + 1 + 64 + 1; /* member 1's endpoint */
    b[ep + 3] = '\0';
    sign_and_text(b, cn, issuer_priv, text);
    CHECK(token_decode(text, &back, 0, err, sizeof err) == -1 && strstr(err, "member 1 endpoint"),
          "NUL in endpoint: %s", err);
    cn = layout(&c, b);
    b[18] = '\t';
    sign_and_text(b, cn, issuer_priv, text);
    CHECK(token_decode(text, &back, 0, err, sizeof err) == -1 && strstr(err, "prefix"),
          "tab in prefix: %s", err);
    uint8_t stranger_priv[32], stranger_pub[32];
    CHECK(keys_ed25519_generate(stranger_priv, stranger_pub, err, sizeof err) == 0, "%s", err);
    memcpy(c.issuer_id_pub, stranger_pub, 32);
    cn = layout(&c, b);
    sign_and_text(b, cn, stranger_priv, text);
    CHECK(token_decode(text, &back, 0, err, sizeof err) == -1 && strstr(err, "issuer"),
          "stranger issuer: %s", err);
    /* Signed by someone else than the issuer it names: altered. */
    memcpy(c.issuer_id_pub, issuer_pub, 32);
    cn = layout(&c, b);
    sign_and_text(b, cn, other_priv, text);
    CHECK(token_decode(text, &back, 0, err, sizeof err) == -1 && strstr(err, "signature"),
          "wrong signer: %s", err);
}

static void test_encode_refusals(void)
{
    struct token t;
    char text[TOKEN_TEXT_MAX], err[256];
    static const char *const bad_prefixes[] = {
        "", "10.77.0.0", "10.77.0.1/16", "10.77.0.0/33", "10.77.0.0/016", "banana/8",
        "fd00::1/64", "fd00::/129", "10.77.0.0 /16", "10.77.0.0/"};
    for (size_t i = 0; i < sizeof bad_prefixes / sizeof *bad_prefixes; i++) {
        make_token(&t);
        strcpy(t.prefix, bad_prefixes[i]);
        CHECK(token_encode(&t, issuer_priv, text, sizeof text, err, sizeof err) == -1 &&
              strstr(err, "prefix"), "prefix \"%s\": %s", bad_prefixes[i], err);
    }
    static const char *const good_prefixes[] = {"10.77.0.0/16", "0.0.0.0/0", "10.1.2.3/32",
                                                "fd00:1::/64", "::/0"};
    for (size_t i = 0; i < sizeof good_prefixes / sizeof *good_prefixes; i++) {
        make_token(&t);
        strcpy(t.prefix, good_prefixes[i]);
        CHECK(token_encode(&t, issuer_priv, text, sizeof text, err, sizeof err) == 0,
              "prefix \"%s\": %s", good_prefixes[i], err);
    }
    static const char *const bad_endpoints[] = {
        "", "host", "host:", ":51820", "host:0", "host:65536", "host:051820", "[::1:51820",
        "[zz]:51820", "fd00::1:51820", "host name:1", "host:12a"};
    for (size_t i = 0; i < sizeof bad_endpoints / sizeof *bad_endpoints; i++) {
        make_token(&t);
        strcpy(t.members[1].endpoint, bad_endpoints[i]);
        CHECK(token_encode(&t, issuer_priv, text, sizeof text, err, sizeof err) == -1 &&
              strstr(err, "member 2 endpoint"), "endpoint \"%s\": %s", bad_endpoints[i], err);
    }
    make_token(&t);
    t.nmembers = 0;
    CHECK(token_encode(&t, issuer_priv, text, sizeof text, err, sizeof err) == -1, "0 members");
    t.nmembers = 5;
    CHECK(token_encode(&t, issuer_priv, text, sizeof text, err, sizeof err) == -1, "5 members");
    make_token(&t);
    memset(t.members[0].id_pub, 0, 32);
    CHECK(token_encode(&t, issuer_priv, text, sizeof text, err, sizeof err) == -1 &&
          strstr(err, "issuer"), "issuer not a member: %s", err);
}

static void test_secret_used(void)
{
    struct token t;
    make_token(&t);
    uint8_t used[3][TOKEN_SECRET_LEN];
    memset(used, 0x77, sizeof used);
    CHECK(token_secret_used(&t, used, 3) == 0, "unused secret reported used");
    CHECK(token_secret_used(&t, used, 0) == 0, "empty list");
    memcpy(used[2], t.secret, TOKEN_SECRET_LEN);
    CHECK(token_secret_used(&t, used, 3) == 1, "used secret not found");
    CHECK(token_secret_used(&t, used, 2) == 0, "found outside the list's length");
    used[2][15] ^= 1;
    CHECK(token_secret_used(&t, used, 3) == 0, "near miss reported used");
}

int main(void)
{
    char err[256];
    CHECK(keys_ed25519_generate(issuer_priv, issuer_pub, err, sizeof err) == 0, "%s", err);
    CHECK(keys_ed25519_generate(other_priv, other_pub, err, sizeof err) == 0, "%s", err);
    test_round_trip_and_layout();
    test_every_alteration();
    test_expiry();
    test_prefix_and_truncation();
    test_structure();
    test_encode_refusals();
    test_secret_used();
    if (failures) {
        fprintf(stderr, "test_token: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_token: ok\n");
    return 0;
}

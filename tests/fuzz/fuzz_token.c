/* fuzz_token.c — libFuzzer target for invite tokens, which a node reads
 * from a user's paste (`shardnode join TOKEN`): token_decode must refuse
 * anything malformed with a message, never crash or read out of bounds.
 *
 * The first input byte picks a mode:
 *  - even: the rest is the token text, decoded as given. Few such inputs
 *    get past the signature, so this mostly exercises the prefix, base64url
 *    and structure checks.
 *  - odd: the rest is the token's binary body without its signature. The
 *    harness writes a fixed issuer's public key over the body's last 32
 *    bytes (where the issuer key sits in any body that parses), signs it
 *    with that issuer's key and encodes it, so the content checks behind the
 *    signature are reached too.
 * Every token accepted in the odd mode must re-encode to the same text: the
 * decoder never accepts what the encoder would not write. */
#include "b64.h"
#include "fuzz_util.h"
#include "keys.h"

#define T "fuzz_token"

/* A fixed issuer: RFC 8032 test 1's secret key. */
static const uint8_t ISSUER_PRIV[32] = FUZZ_RFC8032_TEST1_PRIV;

static void check_accepted(const struct token *t)
{
    fuzz_require(t->version == TOKEN_VERSION, T, "accepted token with version", NULL);
    fuzz_require(t->nmembers >= 1 && t->nmembers <= TOKEN_MAX_MEMBERS, T, "accepted member count",
                 NULL);
    fuzz_require(memchr(t->prefix, '\0', sizeof t->prefix) != NULL, T, "prefix not terminated",
                 NULL);
    for (int i = 0; i < t->nmembers; i++)
        fuzz_require(memchr(t->members[i].endpoint, '\0', sizeof t->members[i].endpoint) != NULL, T,
                     "endpoint not terminated", NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char err[256];
    struct token t;
    if ((data[0] & 1) == 0) {
        /* Exactly the input's size plus the NUL, so ASan sees any overread. */
        char *text = fuzz_text(data + 1, size - 1);
        err[0] = '\0';
        if (token_decode(text, &t, 0, err, sizeof err) == 0)
            check_accepted(&t);
        else
            fuzz_require(err[0] != '\0', T, "refusal without a message", text);
        free(text);
        return 0;
    }
    size_t n = size - 1;
    if (n < KEYS_LEN || n > 1024)
        return 0;
    uint8_t pub[32];
    fuzz_require(keys_ed25519_public(ISSUER_PRIV, pub, err, sizeof err) == 0, T, "issuer key", err);
    uint8_t *msg = malloc(16 + n + KEYS_SIG_LEN);
    memcpy(msg, "shardnode-invite", 16);
    memcpy(msg + 16, data + 1, n);
    memcpy(msg + 16 + n - KEYS_LEN, pub, KEYS_LEN);
    uint8_t *body = msg + 16;
    fuzz_require(keys_sign(ISSUER_PRIV, msg, 16 + n, body + n, err, sizeof err) == 0, T, "sign",
                 err);
    size_t tlen = 5 + b64_encoded_len(n + KEYS_SIG_LEN, 1);
    char *text = malloc(tlen + 1);
    memcpy(text, "snj1.", 5);
    b64_encode(body, n + KEYS_SIG_LEN, 1, text + 5);
    err[0] = '\0';
    if (token_decode(text, &t, 0, err, sizeof err) == 0) {
        check_accepted(&t);
        char again[TOKEN_TEXT_MAX];
        struct token copy = t;
        fuzz_require(token_encode(&copy, ISSUER_PRIV, again, sizeof again, err, sizeof err) == 0, T,
                     "accepted token does not encode", err);
        fuzz_require(strcmp(again, text) == 0, T, "accepted token re-encodes differently", text);
    } else {
        fuzz_require(err[0] != '\0', T, "refusal without a message", text);
    }
    free(text);
    free(msg);
    return 0;
}

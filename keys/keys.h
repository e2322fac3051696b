/* keys.h — the keys/ library: WireGuard key pairs (X25519), the node's
 * Ed25519 identity key and signatures, key files, and invite tokens.
 * Everything goes through OpenSSL's libcrypto.
 *
 * Keys are 32 raw bytes. Functions that can fail return 0 on success and -1
 * on failure, with a message naming the file or field at fault in err (at
 * most errlen bytes, NUL-terminated); err may be NULL when errlen is 0. */
#ifndef SHARDNODE_KEYS_H
#define SHARDNODE_KEYS_H

#include <stddef.h>
#include <stdint.h>

#define KEYS_LEN 32
#define KEYS_SIG_LEN 64
#define KEYS_BASE64_LEN 44 /* WireGuard's form: standard base64 with one '=' */
#define KEYS_HEX_LEN 64    /* the UAPI's form: lowercase hex */

/* ---- X25519 (WireGuard) ---- */

/* A fresh private key, clamped the way `wg genkey` clamps it, and its public key. */
int keys_x25519_generate(uint8_t priv[KEYS_LEN], uint8_t pub[KEYS_LEN], char *err, size_t errlen);
/* The public key of priv: equal to `wg pubkey` for the same private key. */
int keys_x25519_public(const uint8_t priv[KEYS_LEN], uint8_t pub[KEYS_LEN], char *err,
                       size_t errlen);

/* The WireGuard key pair an invite's secret stands for: a joiner holding
 * the token brings its interface up with this key, and the issuer, which
 * added the public key as a peer when it issued the invite, lets it in just
 * far enough to present the secret and its real key (PROTOCOL.md,
 * "Joining"). Deterministic: SHA-256 of a label and the secret, clamped. */
int keys_invite_key(const uint8_t *secret, size_t len, uint8_t priv[KEYS_LEN],
                    uint8_t pub[KEYS_LEN], char *err, size_t errlen);

/* ---- Ed25519 (identity) ---- */

int keys_ed25519_generate(uint8_t priv[KEYS_LEN], uint8_t pub[KEYS_LEN], char *err,
                          size_t errlen);
int keys_ed25519_public(const uint8_t priv[KEYS_LEN], uint8_t pub[KEYS_LEN], char *err,
                        size_t errlen);
/* Ed25519 signature (RFC 8032, pure) of msg[0..len). */
int keys_sign(const uint8_t priv[KEYS_LEN], const void *msg, size_t len,
              uint8_t sig[KEYS_SIG_LEN], char *err, size_t errlen);
/* 1 when sig is pub's signature of msg, 0 otherwise (a malformed key or
 * signature included); never an error. */
int keys_verify(const uint8_t pub[KEYS_LEN], const void *msg, size_t len,
                const uint8_t sig[KEYS_SIG_LEN]);

/* n random bytes from OpenSSL's CSPRNG. */
int keys_random(void *buf, size_t n, char *err, size_t errlen);

/* ---- Mesh ids and message authentication ---- */

#define KEYS_MESH_ID_LEN 16
/* The id of the mesh a founder creates: the first 16 bytes of SHA-256 of a
 * label and the founder's Ed25519 public key. Every member can check that a
 * record claiming to be the founder's (self-admitted) is the founder's. */
int keys_mesh_id(const uint8_t founder_id_pub[KEYS_LEN], uint8_t out[KEYS_MESH_ID_LEN],
                 char *err, size_t errlen);
/* X25519(priv, peer_pub): the same 32 bytes on both sides of a pair of
 * WireGuard keys. Refuses a peer key that gives an all-zero secret. */
int keys_x25519_shared(const uint8_t priv[KEYS_LEN], const uint8_t peer_pub[KEYS_LEN],
                       uint8_t out[KEYS_LEN], char *err, size_t errlen);
/* HMAC-SHA256 of msg[0..len) under key[0..keylen). 0, or -1 (out zeroed). */
int keys_hmac_sha256(const uint8_t *key, size_t keylen, const void *msg, size_t len,
                     uint8_t out[32]);

/* ---- Text forms ---- */

/* out gets KEYS_BASE64_LEN characters and a NUL. */
void keys_to_base64(const uint8_t key[KEYS_LEN], char out[KEYS_BASE64_LEN + 1]);
/* Strict: exactly 44 characters of standard base64 ending in one '=', with
 * the unused bits of the last data character zero (as wg writes them). */
int keys_from_base64(const char *s, uint8_t key[KEYS_LEN], char *err, size_t errlen);
/* out gets KEYS_HEX_LEN lowercase hex digits and a NUL. */
void keys_to_hex(const uint8_t key[KEYS_LEN], char out[KEYS_HEX_LEN + 1]);
/* Exactly 64 hex digits (either case). */
int keys_from_hex(const char *s, uint8_t key[KEYS_LEN], char *err, size_t errlen);

/* ---- Key files (private keys) ---- */

/* Writes the key's base64 and a newline to path, mode 0600, through a
 * temporary file in the same folder renamed over path, so a reader never
 * sees a half-written key and the key is never readable by others. */
int keys_file_write(const char *path, const uint8_t key[KEYS_LEN], char *err, size_t errlen);
/* Reads a key file as `wg genkey > f` writes it (base64, optional newline).
 * Refuses a missing file, one that is not a regular file, one that group or
 * others may read or write (the private key would be exposed), and a
 * malformed one. */
int keys_file_read(const char *path, uint8_t key[KEYS_LEN], char *err, size_t errlen);

/* ---- Invite tokens (token.c; format in docs/PROTOCOL.md) ---- */

#define TOKEN_VERSION 1
#define TOKEN_MAX_MEMBERS 4
#define TOKEN_STR_MAX 63    /* longest prefix or endpoint, in bytes */
#define TOKEN_SECRET_LEN 16
#define TOKEN_MESH_ID_LEN 16
#define TOKEN_TEXT_MAX 1024 /* an encoded token is always shorter than this */

struct token_member {
    uint8_t wg_pub[KEYS_LEN]; /* X25519, WireGuard */
    uint8_t id_pub[KEYS_LEN]; /* Ed25519, identity */
    char endpoint[TOKEN_STR_MAX + 1]; /* "host:port" or "[v6]:port" */
};

struct token {
    uint8_t version; /* TOKEN_VERSION */
    uint8_t mesh_id[TOKEN_MESH_ID_LEN];
    char prefix[TOKEN_STR_MAX + 1]; /* overlay prefix, "10.77.0.0/16" or "fd00:1::/64" */
    int nmembers;                   /* 1..TOKEN_MAX_MEMBERS */
    struct token_member members[TOKEN_MAX_MEMBERS];
    int64_t expires_unix;
    uint8_t secret[TOKEN_SECRET_LEN]; /* single use: the issuer records it once redeemed */
    uint8_t issuer_id_pub[KEYS_LEN];  /* must be one of the members' id_pub */
    uint8_t sig[KEYS_SIG_LEN];
};

/* Signs t with the issuer's Ed25519 private key and writes the token text
 * ("snj1." + base64url, NUL-terminated) to out. Fills t->version,
 * t->issuer_id_pub and t->sig. Refuses a token decode would refuse (other
 * than for expiry): bad prefix, endpoint, member count, or an issuer that is
 * not a member. */
int token_encode(struct token *t, const uint8_t issuer_id_priv[KEYS_LEN], char *out,
                 size_t outlen, char *err, size_t errlen);
/* Parses and verifies a token text. Refusals, in the order they are checked:
 * wrong prefix or version, characters outside base64url, a structure that
 * does not parse (truncated, lengths out of bounds, more than
 * TOKEN_MAX_MEMBERS members), a signature that does not verify (the usual
 * result of an altered character), bad contents, and expiry relative to
 * now_unix. */
int token_decode(const char *text, struct token *t, int64_t now_unix, char *err, size_t errlen);
/* 1 when e is an endpoint a token can carry: "host:port" with a host name or
 * IPv4 address, or "[IPv6]:port", port 1..65535, at most TOKEN_STR_MAX
 * bytes; else 0. The rule token_decode applies. */
int token_endpoint_valid(const char *e);
/* 1 when t's secret is one of used[0..n), 0 otherwise (constant time per entry). */
int token_secret_used(const struct token *t, const uint8_t (*used)[TOKEN_SECRET_LEN], size_t n);

#endif

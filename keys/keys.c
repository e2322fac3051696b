/* keys.c — X25519 and Ed25519 keys through OpenSSL's EVP interface, their
 * text forms, and private key files. */
#include "keys.h"

#include "b64.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

int keys_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* OpenSSL's own reason for the last failure, for messages a user may report. */
static const char *ssl_reason(void)
{
    unsigned long e = ERR_get_error();
    ERR_clear_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    return r ? r : "unknown OpenSSL error";
}

int keys_random(void *buf, size_t n, char *err, size_t errlen)
{
    if (n > (size_t)1 << 30)
        return keys_errf(err, errlen, "random: %zu bytes is too many", n);
    if (RAND_bytes(buf, (int)n) != 1)
        return keys_errf(err, errlen, "random: %s", ssl_reason());
    return 0;
}

static int raw_public(int type, const char *what, const uint8_t priv[KEYS_LEN],
                      uint8_t pub[KEYS_LEN], char *err, size_t errlen)
{
    EVP_PKEY *k = EVP_PKEY_new_raw_private_key(type, NULL, priv, KEYS_LEN);
    if (!k)
        return keys_errf(err, errlen, "%s private key: %s", what, ssl_reason());
    size_t n = KEYS_LEN;
    int ok = EVP_PKEY_get_raw_public_key(k, pub, &n) == 1 && n == KEYS_LEN;
    EVP_PKEY_free(k);
    if (!ok)
        return keys_errf(err, errlen, "%s public key: %s", what, ssl_reason());
    return 0;
}

int keys_x25519_public(const uint8_t priv[KEYS_LEN], uint8_t pub[KEYS_LEN], char *err,
                       size_t errlen)
{
    return raw_public(EVP_PKEY_X25519, "X25519", priv, pub, err, errlen);
}

int keys_x25519_generate(uint8_t priv[KEYS_LEN], uint8_t pub[KEYS_LEN], char *err, size_t errlen)
{
    if (keys_random(priv, KEYS_LEN, err, errlen) != 0)
        return -1;
    /* Clamp as `wg genkey` does (RFC 7748 §5): X25519 clamps anyway when it
     * computes, but storing the clamped form makes our key files byte for
     * byte what wireguard-tools would have written. */
    priv[0] &= 248;
    priv[31] = (uint8_t)((priv[31] & 127) | 64);
    return keys_x25519_public(priv, pub, err, errlen);
}

int keys_invite_key(const uint8_t *secret, size_t len, uint8_t priv[KEYS_LEN],
                    uint8_t pub[KEYS_LEN], char *err, size_t errlen)
{
    /* A label in front keeps this key apart from any other use of the
     * secret; SHA-256 of it is as good as random to anyone without it. */
    static const char label[] = "shardnode invite wireguard key v1";
    unsigned int n = 0;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    int ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1 &&
             EVP_DigestUpdate(c, label, sizeof label - 1) == 1 &&
             EVP_DigestUpdate(c, secret, len) == 1 && EVP_DigestFinal_ex(c, priv, &n) == 1 &&
             n == KEYS_LEN;
    EVP_MD_CTX_free(c);
    if (!ok) {
        snprintf(err, errlen, "SHA-256 failed");
        return -1;
    }
    priv[0] &= 248;
    priv[31] = (uint8_t)((priv[31] & 127) | 64);
    return keys_x25519_public(priv, pub, err, errlen);
}

int keys_ed25519_public(const uint8_t priv[KEYS_LEN], uint8_t pub[KEYS_LEN], char *err,
                        size_t errlen)
{
    return raw_public(EVP_PKEY_ED25519, "Ed25519", priv, pub, err, errlen);
}

int keys_ed25519_generate(uint8_t priv[KEYS_LEN], uint8_t pub[KEYS_LEN], char *err,
                          size_t errlen)
{
    /* An Ed25519 private key is any 32 random bytes (RFC 8032 §5.1.5). */
    if (keys_random(priv, KEYS_LEN, err, errlen) != 0)
        return -1;
    return keys_ed25519_public(priv, pub, err, errlen);
}

int keys_sign(const uint8_t priv[KEYS_LEN], const void *msg, size_t len,
              uint8_t sig[KEYS_SIG_LEN], char *err, size_t errlen)
{
    EVP_PKEY *k = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, priv, KEYS_LEN);
    if (!k)
        return keys_errf(err, errlen, "Ed25519 private key: %s", ssl_reason());
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    size_t n = KEYS_SIG_LEN;
    /* Ed25519 is one-shot: no digest is named (NULL) and DigestSign is
     * given the whole message. */
    int ok = ctx && EVP_DigestSignInit(ctx, NULL, NULL, NULL, k) == 1 &&
             EVP_DigestSign(ctx, sig, &n, msg, len) == 1 && n == KEYS_SIG_LEN;
    EVP_MD_CTX_free(ctx);
    EVP_PKEY_free(k);
    if (!ok)
        return keys_errf(err, errlen, "Ed25519 signature: %s", ssl_reason());
    return 0;
}

int keys_verify(const uint8_t pub[KEYS_LEN], const void *msg, size_t len,
                const uint8_t sig[KEYS_SIG_LEN])
{
    EVP_PKEY *k = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, KEYS_LEN);
    if (!k) {
        ERR_clear_error();
        return 0;
    }
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, k) == 1 &&
             EVP_DigestVerify(ctx, sig, KEYS_SIG_LEN, msg, len) == 1;
    EVP_MD_CTX_free(ctx);
    EVP_PKEY_free(k);
    /* A failed verification leaves an error on OpenSSL's queue; it is an
     * answer here, not an error, so it must not surface in a later message. */
    ERR_clear_error();
    return ok;
}

void keys_to_base64(const uint8_t key[KEYS_LEN], char out[KEYS_BASE64_LEN + 1])
{
    b64_encode(key, KEYS_LEN, 0, out);
}

int keys_from_base64(const char *s, uint8_t key[KEYS_LEN], char *err, size_t errlen)
{
    size_t len = strnlen(s, KEYS_BASE64_LEN + 1);
    if (len != KEYS_BASE64_LEN)
        return keys_errf(err, errlen, "key: %s base64 characters, a key has %d",
                    len > KEYS_BASE64_LEN ? "more than 44" : "fewer than 44", KEYS_BASE64_LEN);
    uint8_t buf[KEYS_LEN + 2];
    size_t n = 0, pos;
    const char *why;
    if (b64_decode(s, len, 0, buf, sizeof buf, &n, &pos, &why) != 0)
        return keys_errf(err, errlen, "key: base64 character %zu: %s", pos + 1, why);
    if (n != KEYS_LEN)
        return keys_errf(err, errlen, "key: decodes to %zu bytes, a key has %d", n, KEYS_LEN);
    memcpy(key, buf, KEYS_LEN);
    OPENSSL_cleanse(buf, sizeof buf);
    return 0;
}

void keys_to_hex(const uint8_t key[KEYS_LEN], char out[KEYS_HEX_LEN + 1])
{
    static const char d[] = "0123456789abcdef";
    for (int i = 0; i < KEYS_LEN; i++) {
        out[2 * i] = d[key[i] >> 4];
        out[2 * i + 1] = d[key[i] & 15];
    }
    out[KEYS_HEX_LEN] = '\0';
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int keys_from_hex(const char *s, uint8_t key[KEYS_LEN], char *err, size_t errlen)
{
    size_t len = strnlen(s, KEYS_HEX_LEN + 1);
    if (len != KEYS_HEX_LEN)
        return keys_errf(err, errlen, "key: %s hex digits, a key has %d",
                    len > KEYS_HEX_LEN ? "more than 64" : "fewer than 64", KEYS_HEX_LEN);
    uint8_t buf[KEYS_LEN];
    for (int i = 0; i < KEYS_LEN; i++) {
        int hi = hex_digit(s[2 * i]), lo = hex_digit(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return keys_errf(err, errlen, "key: character %d is not a hex digit",
                        hi < 0 ? 2 * i + 1 : 2 * i + 2);
        buf[i] = (uint8_t)(hi << 4 | lo);
    }
    memcpy(key, buf, KEYS_LEN);
    OPENSSL_cleanse(buf, sizeof buf);
    return 0;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int keys_file_write(const char *path, const uint8_t key[KEYS_LEN], char *err, size_t errlen)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return keys_errf(err, errlen, "%s: path too long", path);
    /* O_EXCL: never write the key into a file someone else created (and may
     * hold open) in our place; 0600 at creation so it is never readable by
     * others, not even between open and fchmod. */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return keys_errf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
    char line[KEYS_BASE64_LEN + 2];
    keys_to_base64(key, line);
    line[KEYS_BASE64_LEN] = '\n';
    line[KEYS_BASE64_LEN + 1] = '\0';
    int rc = 0;
    const char *what = "";
    int e = 0;
    /* fchmod as well: the creation mode only ever loses bits to the umask,
     * but being explicit keeps 0600 exact whatever the umask. */
    if (fchmod(fd, 0600) != 0)
        rc = -1, e = errno, what = "cannot set mode 0600";
    else if (write_all(fd, line, KEYS_BASE64_LEN + 1) != 0)
        rc = -1, e = errno, what = "cannot write";
    else if (fsync(fd) != 0)
        rc = -1, e = errno, what = "cannot sync";
    OPENSSL_cleanse(line, sizeof line);
    if (close(fd) != 0 && rc == 0)
        rc = -1, e = errno, what = "cannot close";
    if (rc == 0 && rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
        return keys_errf(err, errlen, "%s: cannot rename %s over it: %s", path, tmp, strerror(e));
    }
    if (rc != 0) {
        unlink(tmp);
        return keys_errf(err, errlen, "%s: %s: %s", tmp, what, strerror(e));
    }
    return 0;
}

int keys_file_read(const char *path, uint8_t key[KEYS_LEN], char *err, size_t errlen)
{
    /* O_NONBLOCK: a FIFO put in the key's place must be refused below, not
     * block the node in open(); it changes nothing for a regular file. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return keys_errf(err, errlen, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return keys_errf(err, errlen, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return keys_errf(err, errlen, "%s: not a regular file", path);
    }
    /* Checked on the open descriptor (fstat), so the file judged is the
     * file read. A key others can read is already disclosed; one others can
     * write may be replaced: refuse both rather than use it. */
    if (st.st_mode & 077) {
        close(fd);
        return keys_errf(err, errlen, "%s: mode %04o lets others %s the private key; chmod 600 it",
                    path, (unsigned)(st.st_mode & 07777),
                    (st.st_mode & 044) ? "read" : (st.st_mode & 022) ? "change" : "access");
    }
    char buf[KEYS_BASE64_LEN + 4];
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, sizeof buf - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            OPENSSL_cleanse(buf, sizeof buf);
            return keys_errf(err, errlen, "%s: %s", path, strerror(e));
        }
        if (r == 0 || (n += (size_t)r) == sizeof buf)
            break;
    }
    close(fd);
    /* Exactly what `wg genkey` writes: 44 characters and a newline, which
     * may be missing when the file was written by hand. */
    size_t len = n;
    if (len == KEYS_BASE64_LEN + 1 && buf[KEYS_BASE64_LEN] == '\n')
        len = KEYS_BASE64_LEN;
    int rc = 0;
    if (len != KEYS_BASE64_LEN || memchr(buf, '\0', len)) {
        rc = keys_errf(err, errlen, "%s: expected one base64 key of 44 characters and a newline%s",
                  path, n == 0 ? ", the file is empty" : "");
    } else {
        buf[len] = '\0';
        char why[128];
        if (keys_from_base64(buf, key, why, sizeof why) != 0)
            rc = keys_errf(err, errlen, "%s: %s", path, why);
    }
    OPENSSL_cleanse(buf, sizeof buf);
    return rc;
}

/* ---- mesh ids, shared secrets, MACs ---- */

int keys_mesh_id(const uint8_t founder_id_pub[KEYS_LEN], uint8_t out[KEYS_MESH_ID_LEN],
                 char *err, size_t errlen)
{
    static const char label[] = "shardnode mesh id v1";
    uint8_t h[32];
    unsigned int n = 0;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    int ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1 &&
             EVP_DigestUpdate(c, label, sizeof label - 1) == 1 &&
             EVP_DigestUpdate(c, founder_id_pub, KEYS_LEN) == 1 &&
             EVP_DigestFinal_ex(c, h, &n) == 1 && n == sizeof h;
    EVP_MD_CTX_free(c);
    if (!ok)
        return keys_errf(err, errlen, "mesh id: SHA-256 failed: %s", ssl_reason());
    memcpy(out, h, KEYS_MESH_ID_LEN);
    return 0;
}

int keys_x25519_shared(const uint8_t priv[KEYS_LEN], const uint8_t peer_pub[KEYS_LEN],
                       uint8_t out[KEYS_LEN], char *err, size_t errlen)
{
    EVP_PKEY *k = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, NULL, priv, KEYS_LEN);
    EVP_PKEY *p = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, NULL, peer_pub, KEYS_LEN);
    EVP_PKEY_CTX *c = k && p ? EVP_PKEY_CTX_new(k, NULL) : NULL;
    size_t n = KEYS_LEN;
    int ok = c && EVP_PKEY_derive_init(c) == 1 && EVP_PKEY_derive_set_peer(c, p) == 1 &&
             EVP_PKEY_derive(c, out, &n) == 1 && n == KEYS_LEN;
    EVP_PKEY_CTX_free(c);
    EVP_PKEY_free(p);
    EVP_PKEY_free(k);
    if (!ok) {
        memset(out, 0, KEYS_LEN);
        return keys_errf(err, errlen, "X25519 key agreement: %s (a low-order peer key?)",
                         ssl_reason());
    }
    return 0;
}

int keys_hmac_sha256(const uint8_t *key, size_t keylen, const void *msg, size_t len,
                     uint8_t out[32])
{
    unsigned int n = 0;
    uint8_t *r = HMAC(EVP_sha256(), key, (int)keylen, msg, len, out, &n);
    if (!r || n != 32) {
        ERR_clear_error();
        memset(out, 0, 32);
        return -1;
    }
    return 0;
}

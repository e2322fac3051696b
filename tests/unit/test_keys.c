/* test_keys.c — keys/: X25519 against RFC 7748 and the real `wg` binary,
 * Ed25519 against RFC 8032, text forms, and key files. */
#include "check.h"
#include "keys.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void from_hex(const char *h, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
}

static void test_rfc7748(void)
{
    /* RFC 7748 §6.1: Alice's and Bob's key pairs. */
    static const char *const pairs[][2] = {
        {"77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a",
         "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"},
        {"5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb",
         "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"},
    };
    char err[256];
    for (int i = 0; i < 2; i++) {
        uint8_t priv[32], want[32], pub[32];
        from_hex(pairs[i][0], priv, 32);
        from_hex(pairs[i][1], want, 32);
        CHECK(keys_x25519_public(priv, pub, err, sizeof err) == 0, "%s", err);
        CHECK(memcmp(pub, want, 32) == 0, "RFC 7748 public key %d differs", i);
    }
}

/* Runs cmd, returns its first line without the newline in out. */
static int run_line(const char *cmd, char *out, size_t len)
{
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    int ok = fgets(out, (int)len, f) != NULL;
    int rc = pclose(f);
    if (!ok || rc != 0)
        return -1;
    out[strcspn(out, "\n")] = '\0';
    return 0;
}

static void test_against_wg(void)
{
    if (access("/usr/bin/wg", X_OK) != 0) {
        printf("test_keys: /usr/bin/wg not found (apt-get install wireguard-tools); "
               "the comparison with wg pubkey is skipped\n");
        return;
    }
    char err[256], cmd[256], line[128], b64[KEYS_BASE64_LEN + 1];
    for (int i = 0; i < 8; i++) {
        /* wg's private key, our public key. */
        uint8_t priv[32], pub[32];
        CHECK(run_line("/usr/bin/wg genkey", line, sizeof line) == 0, "wg genkey failed");
        CHECK(keys_from_base64(line, priv, err, sizeof err) == 0, "wg genkey output: %s", err);
        CHECK(keys_x25519_public(priv, pub, err, sizeof err) == 0, "%s", err);
        snprintf(cmd, sizeof cmd, "echo %s | /usr/bin/wg pubkey", line);
        char wgpub[128];
        CHECK(run_line(cmd, wgpub, sizeof wgpub) == 0, "wg pubkey failed");
        keys_to_base64(pub, b64);
        CHECK(strcmp(b64, wgpub) == 0, "public key %s, wg pubkey says %s", b64, wgpub);
        /* Our private key (generated and clamped here), wg's public key. */
        CHECK(keys_x25519_generate(priv, pub, err, sizeof err) == 0, "%s", err);
        keys_to_base64(priv, b64);
        snprintf(cmd, sizeof cmd, "echo %s | /usr/bin/wg pubkey", b64);
        CHECK(run_line(cmd, wgpub, sizeof wgpub) == 0, "wg pubkey failed");
        keys_to_base64(pub, b64);
        CHECK(strcmp(b64, wgpub) == 0, "generated public key %s, wg pubkey says %s", b64, wgpub);
        CHECK((priv[0] & 7) == 0 && (priv[31] & 0xc0) == 0x40, "generated key not clamped");
    }
}

static void test_rfc8032(void)
{
    /* RFC 8032 §7.1, TEST 1: the empty message. */
    uint8_t priv[32], pub[32], want_pub[32], sig[64], want_sig[64];
    from_hex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", priv, 32);
    from_hex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", want_pub, 32);
    from_hex("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
             "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
             want_sig, 64);
    char err[256];
    CHECK(keys_ed25519_public(priv, pub, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(pub, want_pub, 32) == 0, "RFC 8032 public key differs");
    CHECK(keys_sign(priv, "", 0, sig, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(sig, want_sig, 64) == 0, "RFC 8032 signature differs");
    CHECK(keys_verify(pub, "", 0, sig) == 1, "RFC 8032 signature does not verify");
}

static void test_sign_verify(void)
{
    uint8_t priv[32], pub[32], priv2[32], pub2[32], sig[64];
    char err[256];
    const char msg[] = "member record: n1 10.77.0.5 wg=...";
    CHECK(keys_ed25519_generate(priv, pub, err, sizeof err) == 0, "%s", err);
    CHECK(keys_ed25519_generate(priv2, pub2, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(pub, pub2, 32) != 0, "two generated keys are equal");
    CHECK(keys_sign(priv, msg, sizeof msg, sig, err, sizeof err) == 0, "%s", err);
    CHECK(keys_verify(pub, msg, sizeof msg, sig) == 1, "signature does not verify");
    CHECK(keys_verify(pub2, msg, sizeof msg, sig) == 0, "verifies under another key");
    CHECK(keys_verify(pub, msg, sizeof msg - 1, sig) == 0, "verifies a shorter message");
    char m2[sizeof msg];
    for (size_t i = 0; i < sizeof msg; i++) {
        memcpy(m2, msg, sizeof msg);
        m2[i] ^= 1;
        CHECK(keys_verify(pub, m2, sizeof msg, sig) == 0, "verifies with byte %zu flipped", i);
    }
    for (int i = 0; i < 64; i++) {
        uint8_t s2[64];
        memcpy(s2, sig, 64);
        s2[i] ^= 0x80;
        CHECK(keys_verify(pub, msg, sizeof msg, s2) == 0, "verifies with sig byte %d flipped", i);
    }
    /* A public key that is not a curve point: an answer, never an error. */
    uint8_t bad[32];
    memset(bad, 0xff, 32);
    CHECK(keys_verify(bad, msg, sizeof msg, sig) == 0, "verifies under a garbage key");
}

static void test_text_forms(void)
{
    uint8_t k[32], back[32];
    char err[256], b64[KEYS_BASE64_LEN + 1], hex[KEYS_HEX_LEN + 1];
    for (int round = 0; round < 50; round++) {
        CHECK(keys_random(k, 32, err, sizeof err) == 0, "%s", err);
        keys_to_base64(k, b64);
        CHECK(strlen(b64) == 44 && b64[43] == '=' && b64[42] != '=', "base64 form %s", b64);
        CHECK(keys_from_base64(b64, back, err, sizeof err) == 0 && memcmp(k, back, 32) == 0,
              "base64 round trip: %s", err);
        keys_to_hex(k, hex);
        CHECK(strlen(hex) == 64 && strspn(hex, "0123456789abcdef") == 64, "hex form %s", hex);
        CHECK(keys_from_hex(hex, back, err, sizeof err) == 0 && memcmp(k, back, 32) == 0,
              "hex round trip: %s", err);
    }
    /* A known value: 32 zero bytes. */
    memset(k, 0, 32);
    keys_to_base64(k, b64);
    CHECK(strcmp(b64, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=") == 0, "%s", b64);
    keys_to_hex(k, hex);
    CHECK(strcmp(hex, "0000000000000000000000000000000000000000000000000000000000000000") == 0,
          "%s", hex);
    CHECK(keys_from_hex("00000000000000000000000000000000000000000000000000000000000000AB", back,
                        err, sizeof err) == 0 && back[31] == 0xab, "uppercase hex: %s", err);

    static const char *const bad_b64[] = {
        "",
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",   /* 43: no padding */
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==", /* 45 */
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==",  /* 31 bytes */
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB=",  /* non-zero unused bits */
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA-A=",  /* base64url character */
        "AAAAAAAAAAAAAAAAAAAAAAAAAA AAAAAAAAAAAAAAAAA=",  /* space */
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",  /* 44, no '=' */
        "=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",   /* '=' first */
    };
    for (size_t i = 0; i < sizeof bad_b64 / sizeof *bad_b64; i++) {
        err[0] = '\0';
        CHECK(keys_from_base64(bad_b64[i], back, err, sizeof err) == -1,
              "base64 \"%s\" accepted", bad_b64[i]);
        CHECK(strncmp(err, "key:", 4) == 0, "message \"%s\" names no field", err);
    }
    static const char *const bad_hex[] = {
        "", "000000000000000000000000000000000000000000000000000000000000000",
        "00000000000000000000000000000000000000000000000000000000000000000",
        "000000000000000000000000000000000000000000000000000000000000000g",
        " 000000000000000000000000000000000000000000000000000000000000000",
    };
    for (size_t i = 0; i < sizeof bad_hex / sizeof *bad_hex; i++)
        CHECK(keys_from_hex(bad_hex[i], back, err, sizeof err) == -1, "hex \"%s\" accepted",
              bad_hex[i]);
}

static void write_text(const char *path, const char *text, mode_t mode)
{
    unlink(path);
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

static void test_key_files(void)
{
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/test_keys_%d_wg.key", SHARDNODE_TEST_TMP, (int)getpid());
    uint8_t k[32], pub[32], back[32];
    CHECK(keys_x25519_generate(k, pub, err, sizeof err) == 0, "%s", err);
    unlink(path);
    /* Written 0600 whatever the umask allows. */
    mode_t old = umask(0);
    CHECK(keys_file_write(path, k, err, sizeof err) == 0, "%s", err);
    umask(old);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 07777) == 0600, "mode %04o, expected 0600",
          (unsigned)(st.st_mode & 07777));
    CHECK(st.st_size == 45, "key file has %lld bytes, expected 45", (long long)st.st_size);
    CHECK(keys_file_read(path, back, err, sizeof err) == 0 && memcmp(k, back, 32) == 0,
          "read back: %s", err);
    /* Overwriting replaces it (rename over an existing file). */
    uint8_t k2[32];
    CHECK(keys_x25519_generate(k2, pub, err, sizeof err) == 0, "%s", err);
    CHECK(keys_file_write(path, k2, err, sizeof err) == 0, "%s", err);
    CHECK(keys_file_read(path, back, err, sizeof err) == 0 && memcmp(k2, back, 32) == 0,
          "read back after overwrite: %s", err);

    /* 0644: refused with the mode and the fix. */
    chmod(path, 0644);
    CHECK(keys_file_read(path, back, err, sizeof err) == -1, "0644 key file accepted");
    CHECK(strstr(err, path) && strstr(err, "mode 0644 lets others read the private key; "
                                            "chmod 600 it"), "message: %s", err);
    chmod(path, 0620);
    CHECK(keys_file_read(path, back, err, sizeof err) == -1 && strstr(err, "mode 0620") &&
          strstr(err, "change"), "0620 key file: %s", err);
    chmod(path, 0400);
    CHECK(keys_file_read(path, back, err, sizeof err) == 0, "0400 key file refused: %s", err);

    /* The form `wg genkey > f` writes, also without the newline. */
    char b64[KEYS_BASE64_LEN + 1], text[64];
    keys_to_base64(k, b64);
    snprintf(text, sizeof text, "%s", b64);
    write_text(path, text, 0600);
    CHECK(keys_file_read(path, back, err, sizeof err) == 0 && memcmp(k, back, 32) == 0,
          "key without newline: %s", err);
    static const char *const malformed[] = {"", "\n", "not a key\n", "AAAA\n"};
    for (size_t i = 0; i < sizeof malformed / sizeof *malformed; i++) {
        write_text(path, malformed[i], 0600);
        CHECK(keys_file_read(path, back, err, sizeof err) == -1 && strstr(err, path),
              "malformed key file %zu: %s", i, err);
    }
    snprintf(text, sizeof text, "%s\n\n", b64);
    write_text(path, text, 0600);
    CHECK(keys_file_read(path, back, err, sizeof err) == -1, "two newlines accepted");
    snprintf(text, sizeof text, "%s\nextra\n", b64);
    write_text(path, text, 0600);
    CHECK(keys_file_read(path, back, err, sizeof err) == -1, "trailing text accepted");
    snprintf(text, sizeof text, " %s\n", b64);
    write_text(path, text, 0600);
    CHECK(keys_file_read(path, back, err, sizeof err) == -1, "leading space accepted");

    /* A FIFO in the key's place is refused, not waited on. */
    unlink(path);
    CHECK(mkfifo(path, 0600) == 0, "mkfifo %s", path);
    CHECK(keys_file_read(path, back, err, sizeof err) == -1 && strstr(err, "not a regular file"),
          "FIFO: %s", err);

    /* Missing file, and a folder. */
    unlink(path);
    CHECK(keys_file_read(path, back, err, sizeof err) == -1 && strstr(err, path) &&
          strstr(err, "No such file"), "missing key file: %s", err);
    CHECK(keys_file_read(SHARDNODE_TEST_TMP, back, err, sizeof err) == -1,
          "a folder was read as a key file");
    /* Writing into a folder that does not exist fails with the path. */
    snprintf(path, sizeof path, "%s/no-such-dir-%d/wg.key", SHARDNODE_TEST_TMP, (int)getpid());
    CHECK(keys_file_write(path, k, err, sizeof err) == -1 && strstr(err, "no-such-dir"),
          "write into a missing folder: %s", err);
}

/* RFC 7748 §6.1's Diffie-Hellman example, RFC 4231 case 2's HMAC, and the
 * mesh id (a founder is recognised by it). */
static void test_shared_and_mac(void)
{
    uint8_t a[32], b[32], apub[32], bpub[32], ab[32], ba[32], want[32];
    char err[256] = "";
    from_hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a", a, 32);
    from_hex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb", b, 32);
    from_hex("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742", want, 32);
    CHECK(keys_x25519_public(a, apub, err, sizeof err) == 0 &&
              keys_x25519_public(b, bpub, err, sizeof err) == 0,
          "x25519 public: %s", err);
    CHECK(keys_x25519_shared(a, bpub, ab, err, sizeof err) == 0 &&
              keys_x25519_shared(b, apub, ba, err, sizeof err) == 0,
          "x25519 shared: %s", err);
    CHECK(memcmp(ab, want, 32) == 0 && memcmp(ba, want, 32) == 0,
          "X25519 shared secret is not RFC 7748's");
    uint8_t zero[32] = {0};
    CHECK(keys_x25519_shared(a, zero, ab, err, sizeof err) != 0 && strstr(err, "X25519"),
          "an all-zero peer key gives a shared secret (\"%s\")", err);
    uint8_t mac[32];
    from_hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", want, 32);
    CHECK(keys_hmac_sha256((const uint8_t *)"Jefe", 4, "what do ya want for nothing?", 28,
                           mac) == 0 &&
              memcmp(mac, want, 32) == 0,
          "HMAC-SHA256 is not RFC 4231's");
    uint8_t id1[KEYS_MESH_ID_LEN], id2[KEYS_MESH_ID_LEN], id3[KEYS_MESH_ID_LEN];
    CHECK(keys_mesh_id(apub, id1, err, sizeof err) == 0 &&
              keys_mesh_id(apub, id2, err, sizeof err) == 0 &&
              keys_mesh_id(bpub, id3, err, sizeof err) == 0,
          "mesh id: %s", err);
    CHECK(memcmp(id1, id2, sizeof id1) == 0 && memcmp(id1, id3, sizeof id1) != 0,
          "the mesh id is not a function of the founder's key");
}

int main(void)
{
    test_rfc7748();
    test_against_wg();
    test_rfc8032();
    test_sign_verify();
    test_text_forms();
    test_key_files();
    test_shared_and_mac();
    if (failures) {
        fprintf(stderr, "test_keys: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_keys: ok\n");
    return 0;
}

/* fuzz_token_seeds.c — writes fuzz_token's seed corpus into the folder
 * given: valid tokens from our own encoder (1, 2 and 4 members, IPv4 and
 * IPv6), each as a text input (mode byte 0) and as a body input (mode byte
 * 1, the binary token without its signature). */
#include "b64.h"
#include "keys.h"

#include <stdio.h>
#include <string.h>

static int write_seed(const char *dir, const char *name, uint8_t mode, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(&mode, 1, 1, f) != 1 || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "fuzz_token_seeds: cannot write %s\n", path);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_token_seeds DIR\n");
        return 2;
    }
    char err[256], text[TOKEN_TEXT_MAX], name[64];
    uint8_t priv[32], pub[32], bin[TOKEN_TEXT_MAX];
    if (keys_ed25519_generate(priv, pub, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_token_seeds: %s\n", err);
        return 1;
    }
    static const int counts[] = {1, 2, 4};
    for (int s = 0; s < 3; s++) {
        struct token t;
        memset(&t, 0, sizeof t);
        memset(t.mesh_id, 0x5a, sizeof t.mesh_id);
        memset(t.secret, 0x33, sizeof t.secret);
        strcpy(t.prefix, s == 1 ? "fd00:77::/64" : "10.77.0.0/16");
        t.nmembers = counts[s];
        for (int i = 0; i < t.nmembers; i++) {
            memset(t.members[i].wg_pub, 0x10 + i, 32);
            memset(t.members[i].id_pub, 0x20 + i, 32);
            snprintf(t.members[i].endpoint, sizeof t.members[i].endpoint,
                     i == 1 ? "[2001:db8::%d]:51820" : "198.51.100.%d:51820", i + 1);
        }
        memcpy(t.members[0].id_pub, pub, 32);
        t.expires_unix = 1795341600;
        if (token_encode(&t, priv, text, sizeof text, err, sizeof err) != 0) {
            fprintf(stderr, "fuzz_token_seeds: %s\n", err);
            return 1;
        }
        snprintf(name, sizeof name, "text-%d", s);
        if (write_seed(argv[1], name, 0, text, strlen(text)) != 0)
            return 1;
        size_t n = 0, pos;
        const char *why;
        if (b64_decode(text + 5, strlen(text + 5), 1, bin, sizeof bin, &n, &pos, &why) != 0 ||
            n < KEYS_SIG_LEN) {
            fprintf(stderr, "fuzz_token_seeds: own token does not decode\n");
            return 1;
        }
        snprintf(name, sizeof name, "body-%d", s);
        if (write_seed(argv[1], name, 1, bin, n - KEYS_SIG_LEN) != 0)
            return 1;
    }
    return 0;
}

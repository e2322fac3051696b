/* fuzz_gossip_seeds.c — writes fuzz_gossip's seed corpus: valid messages of
 * every gossip type made by our own encoder (with and without updates, every
 * update state, FETCH and both kinds of FETCH_REPLY, PUNCH), and bare signed
 * records (one with a job text, one behind NAT). The records name RFC 8032 test 1's
 * key as their "id" and are signed by it, the key the fuzz target signs with,
 * so mutated records keep reaching the checks behind the signature.
 * Generated at build time, so the seeds follow the encoder.
 *
 * usage: fuzz_gossip_seeds DIR */
#include "keys.h"
#include "mesh.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t SIGNER_PRIV[32] = {
    0x9d, 0x61, 0xb1, 0x9d, 0xef, 0xfd, 0x5a, 0x60, 0xba, 0x84, 0x4a, 0xf4, 0x92, 0xec, 0x2c, 0xc4,
    0x44, 0x49, 0xc5, 0x69, 0x7b, 0x32, 0x69, 0x19, 0x70, 0x3b, 0xac, 0x03, 0x1c, 0xae, 0x7f, 0x60};

static int write_seed(const char *dir, const char *name, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "fuzz_gossip_seeds: cannot write %s\n", path);
        return -1;
    }
    return 0;
}

static void record(gossip_record *r, const uint8_t pub[32], int variant)
{
    memset(r, 0, sizeof *r);
    memset(r->mesh_id, 0x5a, sizeof r->mesh_id);
    strcpy(r->name, variant ? "gpu-box_2.lab" : "n0");
    memset(r->wg_pub, 0x10 + variant, sizeof r->wg_pub);
    memcpy(r->id_pub, pub, 32);
    strcpy(r->address, variant ? "fd5a::7:1" : "10.77.0.2");
    r->port = GOSSIP_DEFAULT_PORT;
    r->incarnation = variant ? 1000000 : 1;
    r->left = variant == 2;
    r->nendpoints = variant ? 3 : 1;
    strcpy(r->endpoints[0], "198.51.100.4:51820");
    strcpy(r->endpoints[1], "[2001:db8::4]:51820");
    strcpy(r->endpoints[2], "host.example.org:443");
    strcpy(r->software, "shardnode 0.1.0");
    r->protocol = MESH_PROTOCOL_VERSION;
    r->mem_free = variant ? 68719476736ull : 0;
    strcpy(r->devices, variant ? "{\"gpus\":[{\"name\":\"H100\",\"mem\":85899345920}]}" : "");
    r->signed_ms = 1760000000000;
    strcpy(r->job, variant == 1 ? "{\"job\":\"llama-tiny\",\"vote\":\"9f2c\",\"step\":12}" : "");
    r->nat = variant == 2;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_gossip_seeds DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    char err[256], name[64];
    uint8_t pub[32];
    if (keys_ed25519_public(SIGNER_PRIV, pub, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_gossip_seeds: %s\n", err);
        return 1;
    }

    /* ALIVE n0, ALIVE gpu-box, LEFT, SUSPECT, DEAD. */
    gossip_update ups[5];
    memset(ups, 0, sizeof ups);
    for (int v = 0; v < 3; v++) {
        gossip_record r;
        record(&r, pub, v);
        ups[v].state = v == 2 ? GOSSIP_LEFT : GOSSIP_ALIVE;
        if (gossip_record_sign(&r, SIGNER_PRIV, &ups[v].rec, err, sizeof err) != 0) {
            fprintf(stderr, "fuzz_gossip_seeds: %s\n", err);
            return 1;
        }
        /* The first two carry an admission ("a"), as every member's record does. */
        if (v < 2 &&
            gossip_admission_sign(&r, SIGNER_PRIV, 1760000000000 + v, &ups[v].rec.adm, err,
                                  sizeof err) != 0) {
            fprintf(stderr, "fuzz_gossip_seeds: %s\n", err);
            return 1;
        }
        snprintf(name, sizeof name, "record-%d", v);
        if (write_seed(dir, name, ups[v].rec.bytes, ups[v].rec.len) != 0)
            return 1;
    }
    ups[3].state = GOSSIP_SUSPECT;
    memset(ups[3].wg_pub, 0x11, 32);
    ups[3].incarnation = 1000000;
    strcpy(ups[3].from, "n0");
    ups[4].state = GOSSIP_DEAD;
    memset(ups[4].wg_pub, 0x12, 32);
    ups[4].incarnation = 3;
    strcpy(ups[4].from, "gpu-box_2.lab");

    uint8_t *buf = malloc(GOSSIP_TCP_MAX);
    uint8_t chunk[100];
    for (size_t i = 0; i < sizeof chunk; i++)
        chunk[i] = (uint8_t)(i * 37);
    int rc = 0;
    for (int t = GOSSIP_MSG_PING; t <= GOSSIP_MSG_RELAY && rc == 0; t++) {
        for (int variant = 0; variant < 2 && rc == 0; variant++) {
            gossip_msg m;
            memset(&m, 0, sizeof m);
            m.type = (gossip_msg_type)t;
            memset(m.mesh_id, 0x5a, sizeof m.mesh_id);
            strcpy(m.from, variant ? "gpu-box_2.lab" : "n0");
            m.seq = variant ? 4000000000u : 1;
            m.updates = ups;
            m.nupdates = variant ? 5 : 0;
            switch ((gossip_msg_type)t) {
            case GOSSIP_MSG_PING: break;
            case GOSSIP_MSG_ACK:
                strcpy(m.observed, variant ? "[2001:db8::9]:40001" : "");
                break;
            case GOSSIP_MSG_PING_REQ:
                strcpy(m.target, variant ? "fd5a::7:1" : "10.77.0.2");
                m.target_port = GOSSIP_DEFAULT_PORT;
                m.nupdates = 0;
                break;
            case GOSSIP_MSG_SYNC: m.flags = (uint32_t)variant; break;
            case GOSSIP_MSG_JOIN:
                memset(m.secret, 0x33, sizeof m.secret);
                m.updates = ups + variant;
                m.nupdates = 1;
                break;
            case GOSSIP_MSG_JOIN_REPLY:
                m.ok = (uint8_t)variant;
                strcpy(m.reason, variant ? "" : "invite secret already used");
                break;
            case GOSSIP_MSG_UPDATE:
                m.updates = ups + 2;
                m.nupdates = variant ? 3 : 1;
                break;
            case GOSSIP_MSG_FETCH:
                m.nupdates = 0;
                strcpy(m.path, variant ? "jobs/llama-tiny/plan-3.json" : "a");
                m.offset = variant ? 1048576 : 0;
                break;
            case GOSSIP_MSG_FETCH_REPLY:
                m.nupdates = 0;
                m.ok = (uint8_t)variant;
                if (variant) {
                    m.offset = 1048576, m.total = 1048576 + sizeof chunk;
                    m.data = chunk, m.data_len = sizeof chunk;
                } else {
                    strcpy(m.reason, "no such file: jobs/x");
                }
                break;
            case GOSSIP_MSG_PUNCH:
                m.nupdates = 0;
                memset(m.punch_from, 0x41 + variant, GOSSIP_KEY_LEN);
                memset(m.punch_to, 0x61, GOSSIP_KEY_LEN);
                m.punch_n = variant ? 1760000000123ull : 1;
                memset(m.punch_mac, 0x7e, GOSSIP_PUNCH_MAC_LEN);
                break;
            case GOSSIP_MSG_RELAY:
                m.nupdates = 0;
                memset(m.punch_from, 0x41 + variant, GOSSIP_KEY_LEN);
                memset(m.punch_to, 0x61, GOSSIP_KEY_LEN);
                memset(m.relay_via, 0x71, GOSSIP_KEY_LEN);
                m.punch_n = variant ? 1760000000123ull : 1;
                memset(m.punch_mac, 0x7e, GOSSIP_PUNCH_MAC_LEN);
                m.relay_ports = variant ? (40001u << 16 | 40002u) : 0;
                break;
            }
            size_t len = 0;
            if (gossip_encode(&m, buf, GOSSIP_TCP_MAX, &len, err, sizeof err) != 0) {
                fprintf(stderr, "fuzz_gossip_seeds: %s\n", err);
                rc = -1;
                break;
            }
            snprintf(name, sizeof name, "msg-%d-%d", t, variant);
            rc = write_seed(dir, name, buf, len);
        }
    }
    free(buf);
    return rc == 0 ? 0 : 1;
}

/* link_cmd.c — `shardnode link`: measure the link between two nodes over
 * the transport the pipeline uses (mesh_net_probe: echoed PROBE frames of
 * several sizes) and fit latency and bandwidth with cost_link_estimate, the
 * numbers the planner's link model takes.
 *
 *   shardnode link --listen HOST:PORT               (one end: answers probes)
 *   shardnode link --connect HOST:PORT [--rounds N] [--max-size BYTES]
 */
#include "commands.h"

#include "mesh.h"
#include "scheduler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINK_RUN "shardnode-link"
#define LINK_LISTENER "link-listener"
#define LINK_PROBER "link-prober"
#define LINK_TIMEOUT_MS 30000
#define LINK_MAX_ROUNDS 100

static int split_host_port(const char *s, char *host, size_t hostlen, int *port)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || !colon[1])
        return -1;
    size_t hl = (size_t)(colon - s);
    if (s[0] == '[' && hl >= 2 && s[hl - 1] == ']')
        s++, hl -= 2;
    if (hl >= hostlen)
        return -1;
    memcpy(host, s, hl);
    host[hl] = 0;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p < 0 || p > 65535)
        return -1;
    *port = (int)p;
    return 0;
}

static void link_usage(void)
{
    fprintf(stderr, "usage: shardnode link --listen HOST:PORT\n"
                    "       shardnode link --connect HOST:PORT [--rounds N] [--max-size BYTES]\n");
}

int cmd_link(int argc, char **argv)
{
    const char *listen = NULL, *connect = NULL;
    long rounds = 5;
    long long max_size = 8 << 20;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr, "shardnode link: %s needs a value\n", a);
            link_usage();
            return 2;
        }
        const char *v = argv[++i];
        char *end;
        if (strcmp(a, "--listen") == 0) {
            listen = v;
        } else if (strcmp(a, "--connect") == 0) {
            connect = v;
        } else if (strcmp(a, "--rounds") == 0) {
            rounds = strtol(v, &end, 10);
            if (*end || rounds < 1 || rounds > LINK_MAX_ROUNDS) {
                fprintf(stderr, "shardnode link: --rounds %s is not in 1..%d\n", v,
                        LINK_MAX_ROUNDS);
                return 2;
            }
        } else if (strcmp(a, "--max-size") == 0) {
            max_size = strtoll(v, &end, 10);
            if (*end || max_size < 4096 || (unsigned long long)max_size > MESH_PROBE_MAX) {
                fprintf(stderr, "shardnode link: --max-size %s is not in 4096..%zu\n", v,
                        MESH_PROBE_MAX);
                return 2;
            }
        } else {
            fprintf(stderr, "shardnode link: unknown flag %s\n", a);
            link_usage();
            return 2;
        }
    }
    if (!listen == !connect) {
        fprintf(stderr, "shardnode link: give exactly one of --listen and --connect\n");
        link_usage();
        return 2;
    }
    char host[256];
    int port = 0;
    const char *addr = listen ? listen : connect;
    if (split_host_port(addr, host, sizeof host, &port) != 0 || (connect && port == 0)) {
        fprintf(stderr, "shardnode link: %s is not HOST:PORT\n", addr);
        return 2;
    }
    mesh_net_config cfg = {.self = listen ? LINK_LISTENER : LINK_PROBER,
                           .run = LINK_RUN,
                           .listen_host = listen ? host : NULL,
                           .listen_port = port,
                           .timeout_ms = LINK_TIMEOUT_MS};
    char err[512];
    mesh_net *n = NULL;
    if (mesh_net_start(&n, &cfg, err, sizeof err) != 0) {
        fprintf(stderr, "shardnode link: %s\n", err);
        return 1;
    }
    int rc = 1;
    if (listen) {
        /* Probes are answered by the transport; this thread only waits for
         * the other end to finish. */
        if (mesh_net_add_peer(n, LINK_PROBER, NULL, 0, err, sizeof err) < 0 ||
            mesh_net_wait_connected(n, -1, err, sizeof err) != 0) {
            fprintf(stderr, "shardnode link: %s\n", err);
            goto out;
        }
        for (;;) {
            int peer;
            mesh_msg m;
            mesh_frame *f;
            if (mesh_net_recv(n, &peer, &m, &f, -1, err, sizeof err) != 0)
                break; /* the prober closed: done */
            mesh_frame_free(f);
        }
        printf("link: %s done\n", LINK_PROBER);
        rc = 0;
        goto out;
    }
    int peer = mesh_net_add_peer(n, LINK_LISTENER, host, port, err, sizeof err);
    if (peer < 0 || mesh_net_wait_connected(n, LINK_TIMEOUT_MS, err, sizeof err) != 0) {
        fprintf(stderr, "shardnode link: %s\n", err);
        goto out;
    }
    size_t sizes[3] = {64, (size_t)max_size / 8, (size_t)max_size};
    int nprobe = 3 * (int)rounds;
    int64_t *rtt = calloc((size_t)nprobe, sizeof *rtt);
    cost_probe *pr = calloc((size_t)nprobe, sizeof *pr);
    if (!rtt || !pr) {
        fprintf(stderr, "shardnode link: out of memory\n");
        free(rtt);
        free(pr);
        goto out;
    }
    /* One warm-up round (connection buffers, page faults), not counted. */
    if (mesh_net_probe(n, peer, sizes, 3, 1, rtt, err, sizeof err) != 0 ||
        mesh_net_probe(n, peer, sizes, 3, (int)rounds, rtt, err, sizeof err) != 0) {
        fprintf(stderr, "shardnode link: %s\n", err);
    } else {
        for (int s = 0; s < 3; s++) {
            for (int r = 0; r < rounds; r++) {
                pr[s * rounds + r].bytes = (int64_t)sizes[s];
                pr[s * rounds + r].rtt_ns = rtt[s * rounds + r];
            }
        }
        cost_link link;
        if (cost_link_estimate(&link, pr, nprobe, err, sizeof err) != 0) {
            fprintf(stderr, "shardnode link: %s\n", err);
        } else {
            for (int s = 0; s < 3; s++) {
                char b[32];
                cost_format_bytes(b, sizeof b, (int64_t)sizes[s]);
                printf("link: %-10s round trips (us):", b);
                for (int r = 0; r < rounds; r++)
                    printf(" %.1f", (double)rtt[s * rounds + r] / 1e3);
                printf("\n");
            }
            printf("link: %s: latency %.1f us, bandwidth %.1f MB/s (%.2f Gbit/s)\n", addr,
                   (double)link.latency_ns / 1e3, (double)link.bandwidth / 1e6,
                   (double)link.bandwidth * 8 / 1e9);
            rc = 0;
        }
    }
    free(rtt);
    free(pr);
out:
    mesh_net_stop(n);
    return rc;
}

/* wg_kernel.c — the kernel driver: the WireGuard module through netlink,
 * using wireguard-tools' embeddable library (the wgembed target, compiled at
 * build time from Debian's wireguard-tools examples, LGPL, kept a separate
 * library). Without it (SHARDNODE_HAVE_WGEMBED undefined) the driver says
 * "not built" and AUTO uses wireguard-go. */
#define _DEFAULT_SOURCE /* IFNAMSIZ in <net/if.h>, needed by wireguard.h */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wg_internal.h"

#ifndef SHARDNODE_HAVE_WGEMBED

static int not_built(mesh_wg *wg, char *err, size_t errlen) {
    mesh_errf(err, errlen, "wireguard %s: kernel driver not built (wireguard-tools' "
            "embeddable library was not found at build time)", wg->ifname);
    return -1;
}
int wg_kernel_open(mesh_wg *wg, const mesh_wg_config *cfg, char *err, size_t errlen) {
    (void)cfg;
    not_built(wg, err, errlen);
    return -2;
}
int wg_kernel_set_peer(mesh_wg *wg, const uint8_t pub[MESH_WG_KEY_LEN], const char *endpoint,
                       const char *const *allowed, size_t n, int keepalive, char *err,
                       size_t errlen) {
    (void)pub, (void)endpoint, (void)allowed, (void)n, (void)keepalive;
    return not_built(wg, err, errlen);
}
int wg_kernel_remove_peer(mesh_wg *wg, const uint8_t pub[MESH_WG_KEY_LEN], char *err,
                          size_t errlen) {
    (void)pub;
    return not_built(wg, err, errlen);
}
int wg_kernel_get_peers(mesh_wg *wg, mesh_wg_peer_info **peers, size_t *npeers, char *err,
                        size_t errlen) {
    (void)peers, (void)npeers;
    return not_built(wg, err, errlen);
}
void wg_kernel_close(mesh_wg *wg) { (void)wg; }

#else

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>

#include "wireguard.h"

int wg_kernel_open(mesh_wg *wg, const mesh_wg_config *cfg, char *err, size_t errlen) {
    int rc = wg_add_device(wg->ifname);
    if (rc < 0) {
        /* No module (or it cannot be loaded): the link kind is unknown. */
        if (rc == -EOPNOTSUPP || rc == -EPROTONOSUPPORT || rc == -ENODEV || rc == -ENOENT) {
            mesh_errf(err, errlen, "wireguard %s: no kernel WireGuard module (%s)", wg->ifname,
                    strerror(-rc));
            return -2;
        }
        mesh_errf(err, errlen, "wireguard %s: creating the kernel interface: %s", wg->ifname,
                strerror(-rc));
        return -1;
    }
    wg_device dev;
    memset(&dev, 0, sizeof dev);
    snprintf(dev.name, sizeof dev.name, "%s", wg->ifname);
    memcpy(dev.private_key, cfg->private_key, MESH_WG_KEY_LEN);
    dev.listen_port = (uint16_t)cfg->listen_port;
    dev.flags = WGDEVICE_HAS_PRIVATE_KEY | WGDEVICE_HAS_LISTEN_PORT | WGDEVICE_REPLACE_PEERS;
    rc = wg_set_device(&dev);
    memset(dev.private_key, 0, sizeof dev.private_key);
    if (rc < 0) {
        mesh_errf(err, errlen, "wireguard %s: setting key and port: %s", wg->ifname,
                strerror(-rc));
        wg_del_device(wg->ifname);
        return -1;
    }
    return 0;
}

int wg_kernel_set_peer(mesh_wg *wg, const uint8_t pub[MESH_WG_KEY_LEN], const char *endpoint,
                       const char *const *allowed, size_t n, int keepalive, char *err,
                       size_t errlen) {
    wg_device dev;
    wg_peer peer;
    memset(&dev, 0, sizeof dev);
    memset(&peer, 0, sizeof peer);
    snprintf(dev.name, sizeof dev.name, "%s", wg->ifname);
    memcpy(peer.public_key, pub, MESH_WG_KEY_LEN);
    peer.flags = WGPEER_HAS_PUBLIC_KEY | WGPEER_REPLACE_ALLOWEDIPS |
                 WGPEER_HAS_PERSISTENT_KEEPALIVE_INTERVAL;
    peer.persistent_keepalive_interval = (uint16_t)keepalive;
    if (endpoint) {
        struct sockaddr_storage ss;
        socklen_t sl;
        wg_parse_endpoint(endpoint, &ss, &sl); /* checked by the caller */
        memcpy(&peer.endpoint, &ss, sl);
    }
    wg_allowedip *ips = n ? calloc(n, sizeof *ips) : NULL;
    if (n && !ips) {
        mesh_errf(err, errlen, "wireguard %s: out of memory", wg->ifname);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        wg_cidr c;
        wg_parse_cidr(allowed[i], &c); /* checked by the caller */
        ips[i].family = (uint16_t)c.family;
        memcpy(c.family == AF_INET ? (void *)&ips[i].ip4 : (void *)&ips[i].ip6, c.addr,
               c.family == AF_INET ? 4 : 16);
        ips[i].cidr = (uint8_t)c.plen;
        ips[i].next_allowedip = i + 1 < n ? &ips[i + 1] : NULL;
    }
    peer.first_allowedip = n ? &ips[0] : NULL;
    peer.last_allowedip = n ? &ips[n - 1] : NULL;
    dev.first_peer = dev.last_peer = &peer;
    int rc = wg_set_device(&dev);
    free(ips);
    if (rc < 0) {
        char hex[2 * MESH_WG_KEY_LEN + 1];
        wg_hex(pub, hex);
        mesh_errf(err, errlen, "wireguard %s: peer %.16s...: %s", wg->ifname, hex, strerror(-rc));
        return -1;
    }
    return 0;
}

int wg_kernel_remove_peer(mesh_wg *wg, const uint8_t pub[MESH_WG_KEY_LEN], char *err,
                          size_t errlen) {
    wg_device dev;
    wg_peer peer;
    memset(&dev, 0, sizeof dev);
    memset(&peer, 0, sizeof peer);
    snprintf(dev.name, sizeof dev.name, "%s", wg->ifname);
    memcpy(peer.public_key, pub, MESH_WG_KEY_LEN);
    peer.flags = WGPEER_HAS_PUBLIC_KEY | WGPEER_REMOVE_ME;
    dev.first_peer = dev.last_peer = &peer;
    int rc = wg_set_device(&dev);
    if (rc < 0) {
        char hex[2 * MESH_WG_KEY_LEN + 1];
        wg_hex(pub, hex);
        mesh_errf(err, errlen, "wireguard %s: removing peer %.16s...: %s", wg->ifname, hex,
                strerror(-rc));
        return -1;
    }
    return 0;
}

int wg_kernel_get_peers(mesh_wg *wg, mesh_wg_peer_info **peers, size_t *npeers, char *err,
                        size_t errlen) {
    wg_device *dev = NULL;
    int rc = wg_get_device(&dev, wg->ifname);
    if (rc < 0) {
        mesh_errf(err, errlen, "wireguard %s: reading the device: %s", wg->ifname, strerror(-rc));
        return -1;
    }
    size_t n = 0;
    wg_peer *p;
    wg_for_each_peer(dev, p) n++;
    mesh_wg_peer_info *list = n ? calloc(n, sizeof *list) : NULL;
    if (n && !list) {
        wg_free_device(dev);
        mesh_errf(err, errlen, "wireguard %s: out of memory", wg->ifname);
        return -1;
    }
    size_t i = 0;
    wg_for_each_peer(dev, p) {
        mesh_wg_peer_info *o = &list[i++];
        memcpy(o->public_key, p->public_key, MESH_WG_KEY_LEN);
        char host[INET6_ADDRSTRLEN];
        if (p->endpoint.addr.sa_family == AF_INET &&
            inet_ntop(AF_INET, &p->endpoint.addr4.sin_addr, host, sizeof host))
            snprintf(o->endpoint, sizeof o->endpoint, "%s:%u", host,
                     ntohs(p->endpoint.addr4.sin_port));
        else if (p->endpoint.addr.sa_family == AF_INET6 &&
                 inet_ntop(AF_INET6, &p->endpoint.addr6.sin6_addr, host, sizeof host))
            snprintf(o->endpoint, sizeof o->endpoint, "[%s]:%u", host,
                     ntohs(p->endpoint.addr6.sin6_port));
        o->last_handshake_sec = p->last_handshake_time.tv_sec;
        o->last_handshake_nsec = p->last_handshake_time.tv_nsec;
        o->rx_bytes = p->rx_bytes;
        o->tx_bytes = p->tx_bytes;
        o->keepalive = p->persistent_keepalive_interval;
    }
    wg_free_device(dev);
    *peers = list;
    *npeers = n;
    return 0;
}

void wg_kernel_close(mesh_wg *wg) {
    int rc = wg_del_device(wg->ifname);
    if (rc < 0)
        fprintf(stderr, "wireguard %s: deleting the kernel interface: %s\n", wg->ifname,
                strerror(-rc));
}

#endif

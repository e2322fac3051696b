/* wg_internal.h — private to wg.c, wg_uapi.c and wg_kernel.c. */
#ifndef SHARDNODE_MESH_WG_INTERNAL_H
#define SHARDNODE_MESH_WG_INTERNAL_H

#include <sys/socket.h>
#include <sys/types.h>

#include "mesh.h"
#include "mesh_internal.h"

struct mesh_wg {
    char ifname[MESH_WG_IFNAME_MAX];
    mesh_wg_driver driver;      /* KERNEL or USERSPACE once open */
    pid_t child;                /* userspace: the wireguard-go process */
    char sock_path[108];        /* userspace: its UAPI socket */
};

/* A parsed "IP/len". */
typedef struct {
    int family;                 /* AF_INET or AF_INET6 */
    unsigned char addr[16];
    int plen;
} wg_cidr;

void wg_hex(const uint8_t key[MESH_WG_KEY_LEN], char out[2 * MESH_WG_KEY_LEN + 1]);
int wg_unhex(const char *s, size_t n, uint8_t key[MESH_WG_KEY_LEN]);
int wg_parse_cidr(const char *s, wg_cidr *c);
/* "IP:port" or "[IPv6]:port"; port 1..65535. */
int wg_parse_endpoint(const char *s, struct sockaddr_storage *ss, socklen_t *sslen);
/* Runs argv[0] (searched in PATH) and waits; the child's stderr (bounded)
 * goes into the error message. */
int wg_run(char *const argv[], const char *ifname, char *err, size_t errlen);

/* Userspace driver (wg_uapi.c). */
int wg_uapi_open(mesh_wg *wg, const mesh_wg_config *cfg, char *err, size_t errlen);
int wg_uapi_set_peer(mesh_wg *wg, const uint8_t pub[MESH_WG_KEY_LEN], const char *endpoint,
                     const char *const *allowed, size_t n, int keepalive, char *err,
                     size_t errlen);
int wg_uapi_remove_peer(mesh_wg *wg, const uint8_t pub[MESH_WG_KEY_LEN], char *err,
                        size_t errlen);
int wg_uapi_get_peers(mesh_wg *wg, mesh_wg_peer_info **peers, size_t *npeers, char *err,
                      size_t errlen);
void wg_uapi_close(mesh_wg *wg);

/* Kernel driver (wg_kernel.c). wg_kernel_open returns -2 (with a message)
 * when the driver is unavailable: not built, or no kernel module. */
int wg_kernel_open(mesh_wg *wg, const mesh_wg_config *cfg, char *err, size_t errlen);
int wg_kernel_set_peer(mesh_wg *wg, const uint8_t pub[MESH_WG_KEY_LEN], const char *endpoint,
                       const char *const *allowed, size_t n, int keepalive, char *err,
                       size_t errlen);
int wg_kernel_remove_peer(mesh_wg *wg, const uint8_t pub[MESH_WG_KEY_LEN], char *err,
                          size_t errlen);
int wg_kernel_get_peers(mesh_wg *wg, mesh_wg_peer_info **peers, size_t *npeers, char *err,
                        size_t errlen);
void wg_kernel_close(mesh_wg *wg);

#endif

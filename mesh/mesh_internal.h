/* mesh_internal.h — private to mesh/: the message writer the codec, the
 * transport and the WireGuard control share. Not part of mesh.h. */
#ifndef SHARDNODE_MESH_INTERNAL_H
#define SHARDNODE_MESH_INTERNAL_H

#include <stddef.h>

/* Formats a message into err (NUL-terminated, truncated to errlen); returns
 * -1 so a failing function can `return mesh_errf(...)`. */
int mesh_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif

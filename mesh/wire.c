/* wire.c — the frame codec (see mesh.h and docs/PROTOCOL.md). */
#include "mesh.h"

#include <string.h>

/* FNV-1a 64: stable across machines and builds. */
uint64_t mesh_run_id(const char *run)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)run; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

size_t mesh_dtype_size(mesh_dtype d)
{
    switch (d) {
    case MESH_F32: return 4;
    case MESH_BF16: return 2;
    case MESH_I32: return 4;
    }
    return 0;
}

/* wire_internal.h — what the frame codec's two files share (mesh/ private):
 * the key table in the order the encoder writes it, which keys each message
 * type has, and the tensor check both sides make. wire.c defines them;
 * wire_decode.c reads frames with them. */
#ifndef SHARDNODE_MESH_WIRE_INTERNAL_H
#define SHARDNODE_MESH_WIRE_INTERNAL_H

#include "mesh.h"

#include <stddef.h>
#include <stdint.h>

/* The enum order is the order the encoder writes keys in: "data" last, so
 * the tensor bytes can follow the head without a copy. */
enum {
    K_V, K_T, K_RUN, K_EP, K_STEP, K_MB, K_ST, K_KEPT, K_VAL, K_FL,
    K_NAME, K_TEXT, K_DT, K_SHAPE, K_LAB, K_DATA, K_COUNT
};

#define KEY(k) (1u << (k))

extern const char *const wire_key_names[K_COUNT];
/* A known type's keys (KEY bits; every allowed key is also required) and
 * name; t must be known (wire_known_type). */
int wire_known_type(uint64_t t);
uint32_t wire_type_keys(mesh_msg_type t);
const char *wire_type_name(mesh_msg_type t);
/* The tensor's byte count must be exactly numel(shape) * dtype size. */
int wire_tensor_check(mesh_dtype dt, int ndim, const int64_t *shape, size_t nbytes, char *err,
                      size_t errlen);

#endif

/* gossip_wire_internal.h — private to the gossip codec: what
 * gossip_msgpack.c (the cursor, the field rules, packing, the strict reader)
 * gives gossip_record.c (records, admissions) and gossip_wire.c (messages,
 * MACs). Not part of mesh.h. */
#ifndef SHARDNODE_MESH_GOSSIP_WIRE_INTERNAL_H
#define SHARDNODE_MESH_GOSSIP_WIRE_INTERNAL_H

#include "mesh.h"

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

/* A key's bit in a set of keys (the keys a type carries, the keys seen). */
#define KEY(k) (1u << (k))

/* A cursor over the bytes (the decoder) or just a place to name things (the
 * encoder's checks). Every message reads "<ctx>: field "<key>": <what>", or
 * "<ctx>: <what>" when no field is being read. */
typedef struct {
    const uint8_t *p, *end;
    char ctx[96];         /* "gossip PING", "gossip record", "record of n1" */
    const char *key;      /* the field being read, or NULL */
    char base[24];        /* "up[3]": the update being read */
    char keybuf[64];      /* "up[3].inc", "ep[1]" */
    char *err;
    size_t errlen;
} gossip_cur;

/* msgpack-c writes into the caller's buffer; past its end bytes are only
 * counted, so the message can say how many it needed. */
typedef struct {
    uint8_t *buf;
    size_t cap, len;
} gossip_fixbuf;

/* An integer of any msgpack width, as sign and magnitude. */
typedef struct {
    int neg;
    uint64_t u; /* when !neg */
    int64_t i;  /* when neg */
} gossip_wire_int;

/* The cursor's error message, naming the field being read; returns -1. */
int gossip_cerr(const gossip_cur *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gossip_cur_init(gossip_cur *c, const void *p, size_t len, const char *ctx, char *err,
                     size_t errlen);
/* Points key at "ep[3]" or "up[3].s". */
void gossip_key_index(gossip_cur *c, const char *name, int i);
void gossip_key_in_update(gossip_cur *c, const char *name);

/* The field rules: the encoder applies them to what it is given, the
 * decoder to what it read. */
int gossip_judge_name(gossip_cur *c, const char *s);
int gossip_judge_address(gossip_cur *c, const char *s);
int gossip_judge_endpoint(gossip_cur *c, const char *s, int empty_ok);
int gossip_judge_path(gossip_cur *c, const char *s);
int gossip_judge_part(gossip_cur *c, uint64_t offset, size_t data_len, uint64_t total);
/* A C string field of the caller's struct: it must end within its array. */
int gossip_check_str(gossip_cur *c, const char *s, size_t cap);

/* Packing into a gossip_fixbuf (msgpack_packer_init's write callback). */
int gossip_fixbuf_write(void *data, const char *b, size_t n);
int gossip_pack_str(msgpack_packer *pk, const char *s);
int gossip_pack_bin(msgpack_packer *pk, const void *p, size_t n);

/* The strict reader: every read first checks that the bytes are there and
 * returns -1 with the cursor's error when they are not, or when the value
 * is not the kind or in the range asked for. */
size_t gossip_left(const gossip_cur *r);
int gossip_need(gossip_cur *r, size_t n);
/* An n-byte big-endian length or integer. */
int gossip_read_be(gossip_cur *r, int n, uint64_t *out);
int gossip_wrong_kind(gossip_cur *r, const char *want, uint8_t b);
int gossip_read_int(gossip_cur *r, const char *want, gossip_wire_int *v);
int gossip_read_uint(gossip_cur *r, uint64_t min, uint64_t max, uint64_t *out);
int gossip_read_i64(gossip_cur *r, int64_t *out);
/* A boolean; with ints_too, the integers 0 and 1 as well. */
int gossip_read_bool(gossip_cur *r, int ints_too, uint8_t *out);
/* A str's header: its length, the bytes themselves still to be consumed. */
int gossip_read_str_len(gossip_cur *r, uint64_t *len);
int gossip_read_str(gossip_cur *r, char *dst, size_t cap);
/* A bin of min..max bytes, copied into dst. */
int gossip_read_bin(gossip_cur *r, void *dst, size_t min, size_t max, size_t *len);
int gossip_read_array_len(gossip_cur *r, uint64_t *len);
int gossip_read_map_len(gossip_cur *r, uint64_t *len);
/* A map key from names[0..count). `where` is the field the map is (NULL
 * for the top level), for the messages about the key itself. */
int gossip_read_key(gossip_cur *r, const char *const *names, int count, const char *where,
                    int *k);
/* Skips one value of any msgpack kind (bounded by the bytes and depth). */
int gossip_skip_any(gossip_cur *r, int depth);

#endif

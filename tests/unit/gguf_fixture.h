/* gguf_fixture.h — builds GGUF files byte by byte for the unit tests:
 * header, metadata of every type, tensor infos, padding and data, so each
 * test can break exactly one thing. Header-only. */
#ifndef SHARDNODE_TEST_GGUF_FIXTURE_H
#define SHARDNODE_TEST_GGUF_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned char *p;
    size_t n, cap;
} gbuf;

static inline void gb_put(gbuf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static inline void gb_u8(gbuf *b, uint8_t v) { gb_put(b, &v, 1); }
static inline void gb_u16(gbuf *b, uint16_t v) { gb_put(b, &v, 2); }
static inline void gb_u32(gbuf *b, uint32_t v) { gb_put(b, &v, 4); }
static inline void gb_u64(gbuf *b, uint64_t v) { gb_put(b, &v, 8); }
static inline void gb_f32(gbuf *b, float v) { gb_put(b, &v, 4); }
static inline void gb_str(gbuf *b, const char *s)
{
    gb_u64(b, strlen(s));
    gb_put(b, s, strlen(s));
}

static inline void gb_header(gbuf *b, uint32_t version, uint64_t ntensors, uint64_t nkv)
{
    gb_put(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, ntensors);
    gb_u64(b, nkv);
}

static inline void gb_kv_u32(gbuf *b, const char *key, uint32_t v)
{
    gb_str(b, key);
    gb_u32(b, 4);
    gb_u32(b, v);
}

static inline void gb_kv_f32(gbuf *b, const char *key, float v)
{
    gb_str(b, key);
    gb_u32(b, 6);
    gb_f32(b, v);
}

static inline void gb_kv_str(gbuf *b, const char *key, const char *v)
{
    gb_str(b, key);
    gb_u32(b, 8);
    gb_str(b, v);
}

static inline void gb_kv_strs(gbuf *b, const char *key, const char *const *v, int n)
{
    gb_str(b, key);
    gb_u32(b, 9);
    gb_u32(b, 8);
    gb_u64(b, (uint64_t)n);
    for (int i = 0; i < n; i++) gb_str(b, v[i]);
}

static inline void gb_kv_i32s(gbuf *b, const char *key, const int32_t *v, int n)
{
    gb_str(b, key);
    gb_u32(b, 9);
    gb_u32(b, 5);
    gb_u64(b, (uint64_t)n);
    gb_put(b, v, 4 * (size_t)n);
}

static inline void gb_tensor(gbuf *b, const char *name, int ndim, const uint64_t *ne, uint32_t type,
                      uint64_t offset)
{
    gb_str(b, name);
    gb_u32(b, (uint32_t)ndim);
    for (int i = 0; i < ndim; i++) gb_u64(b, ne[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

static inline void gb_align(gbuf *b, size_t a)
{
    while (b->n % a) gb_u8(b, 0);
}

static inline int gb_write(const gbuf *b, const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(b->p, 1, b->n, f) == b->n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

#endif

/* gguf.c — read a GGUF file (llama.cpp's format), versions 2 and 3.
 *
 * Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64
 * metadata count; metadata entries (string key, u32 type, value); tensor
 * infos (string name, u32 n_dims, u64 dims[n_dims], u32 ggml type, u64
 * offset); padding to general.alignment (default 32); the data section,
 * where each tensor starts at its offset (a multiple of the alignment).
 * A string is a u64 length and that many bytes; an array a u32 element
 * type, a u64 count and the elements.
 *
 * The file is memory-mapped and the whole header is validated before
 * anything is handed out: every read is bounds-checked against the file's
 * size, counts are bounded by the bytes left, and every message names the
 * file, the key or tensor and the byte offset. */
#include "import.h"
#include "model_util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c assumes a little-endian host"
#endif

struct gguf_file {
    char *path;
    const unsigned char *map;
    size_t size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    int nkv, ntensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
};

/* A read position in the mapping; every read checks the bytes are there. */
typedef struct {
    const gguf_file *f;
    uint64_t pos;
    char *err;
    size_t errlen;
} cursor;

static int need(cursor *c, uint64_t n, const char *what)
{
    if (n <= c->f->size - c->pos) return 0;
    return model_errf(c->err, c->errlen, "%s: byte %llu: file ends inside %s (needs %llu bytes, "
                      "%llu left)", c->f->path, (unsigned long long)c->pos, what,
                      (unsigned long long)n, (unsigned long long)(c->f->size - c->pos));
}

static uint64_t get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int read_u32(cursor *c, uint32_t *v, const char *what)
{
    if (need(c, 4, what)) return -1;
    *v = (uint32_t)get_le(c->f->map + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int read_u64(cursor *c, uint64_t *v, const char *what)
{
    if (need(c, 8, what)) return -1;
    *v = get_le(c->f->map + c->pos, 8);
    c->pos += 8;
    return 0;
}

/* A string: *p points into the mapping, *len its bytes. */
static int read_str(cursor *c, const unsigned char **p, uint64_t *len, const char *what)
{
    uint64_t at = c->pos;
    if (read_u64(c, len, what)) return -1;
    if (*len > c->f->size - c->pos)
        return model_errf(c->err, c->errlen, "%s: byte %llu: %s has length %llu, more than the "
                          "%llu bytes left in the file", c->f->path, (unsigned long long)at, what,
                          (unsigned long long)*len, (unsigned long long)(c->f->size - c->pos));
    *p = c->f->map + c->pos;
    c->pos += *len;
    return 0;
}

/* Size of a scalar value type, 0 for strings and arrays, -1 if unknown. */
static int scalar_size(uint32_t type)
{
    static const int sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return type < sizeof sizes / sizeof sizes[0] ? sizes[type] : -1;
}

static const char *value_type_name(uint32_t type)
{
    static const char *const names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32",
                                        "float32", "bool", "string", "array", "uint64", "int64",
                                        "float64"};
    return type < sizeof names / sizeof names[0] ? names[type] : "unknown";
}

static int read_scalar(cursor *c, const char *key, uint32_t type, gguf_kv *kv)
{
    const unsigned char *p = c->f->map + c->pos;
    int size = scalar_size(type);
    if (need(c, (uint64_t)size, "a metadata value")) return -1;
    uint64_t raw = get_le(p, size);
    switch (type) {
    case GGUF_INT8: kv->v.i = (int8_t)raw; break;
    case GGUF_INT16: kv->v.i = (int16_t)raw; break;
    case GGUF_INT32: kv->v.i = (int32_t)raw; break;
    case GGUF_INT64: memcpy(&kv->v.i, &raw, 8); break;
    case GGUF_FLOAT32: {
        uint32_t r32 = (uint32_t)raw;
        float fl;
        memcpy(&fl, &r32, 4);
        kv->v.f = fl;
        break;
    }
    case GGUF_FLOAT64: memcpy(&kv->v.f, &raw, 8); break;
    case GGUF_BOOL:
        if (raw > 1)
            return model_errf(c->err, c->errlen, "%s: byte %llu: key %s: bool value %llu is "
                              "neither 0 nor 1", c->f->path, (unsigned long long)c->pos, key,
                              (unsigned long long)raw);
        kv->v.b = raw == 1;
        break;
    default: kv->v.u = raw; break;
    }
    c->pos += (uint64_t)size;
    return 0;
}

static int read_array(cursor *c, gguf_kv *kv)
{
    uint64_t at = c->pos;
    uint32_t et;
    if (read_u32(c, &et, "an array's element type") || read_u64(c, &kv->count, "an array's "
                                                                "length"))
        return -1;
    int size = scalar_size(et);
    if (size < 0 || et == GGUF_ARRAY)
        return model_errf(c->err, c->errlen, "%s: byte %llu: key %s: array of %s (type %u) is "
                          "not supported", c->f->path, (unsigned long long)at, kv->key,
                          value_type_name(et), et);
    kv->elem_type = (gguf_value_type)et;
    kv->data = c->f->map + c->pos;
    uint64_t left = c->f->size - c->pos, min = size ? (uint64_t)size : 8;
    if (kv->count > left / min)
        return model_errf(c->err, c->errlen, "%s: byte %llu: key %s: array of %llu %s elements "
                          "cannot fit in the %llu bytes left", c->f->path, (unsigned long long)at,
                          kv->key, (unsigned long long)kv->count, value_type_name(et),
                          (unsigned long long)left);
    if (size) {
        c->pos += kv->count * (uint64_t)size;
        if (et == GGUF_BOOL)
            for (uint64_t i = 0; i < kv->count; i++)
                if (kv->data[i] > 1)
                    return model_errf(c->err, c->errlen, "%s: byte %llu: key %s: element %llu "
                                      "is a bool that is neither 0 nor 1", c->f->path,
                                      (unsigned long long)(c->pos - kv->count + i), kv->key,
                                      (unsigned long long)i);
        return 0;
    }
    kv->str_at = malloc((size_t)(kv->count ? kv->count : 1) * sizeof *kv->str_at);
    if (!kv->str_at)
        return model_errf(c->err, c->errlen, "%s: key %s: out of memory for %llu strings",
                          c->f->path, kv->key, (unsigned long long)kv->count);
    for (uint64_t i = 0; i < kv->count; i++) {
        const unsigned char *p;
        uint64_t len;
        kv->str_at[i] = c->pos - (uint64_t)(kv->data - c->f->map);
        if (read_str(c, &p, &len, "an array's string")) return -1;
    }
    return 0;
}

static int read_kv(cursor *c, gguf_kv *kv, int index)
{
    const unsigned char *key;
    uint64_t klen;
    uint32_t type;
    kv->offset = c->pos;
    if (read_str(c, &key, &klen, "a metadata key")) return -1;
    if (klen == 0 || klen > 65535 || memchr(key, 0, klen))
        return model_errf(c->err, c->errlen, "%s: byte %llu: metadata key %d is empty, longer "
                          "than 65535 bytes or holds a NUL byte", c->f->path,
                          (unsigned long long)kv->offset, index);
    if (!(kv->key = malloc(klen + 1)))
        return model_errf(c->err, c->errlen, "%s: out of memory", c->f->path);
    memcpy(kv->key, key, klen);
    kv->key[klen] = 0;
    for (int i = 0; i < index; i++)
        if (strcmp(c->f->kv[i].key, kv->key) == 0)
            return model_errf(c->err, c->errlen, "%s: byte %llu: key %s appears twice",
                              c->f->path, (unsigned long long)kv->offset, kv->key);
    uint64_t tpos = c->pos;
    if (read_u32(c, &type, "a metadata value type")) return -1;
    kv->type = (gguf_value_type)type;
    if (scalar_size(type) < 0)
        return model_errf(c->err, c->errlen, "%s: byte %llu: key %s has unknown value type %u",
                          c->f->path, (unsigned long long)tpos, kv->key, type);
    if (type == GGUF_STRING) {
        kv->count = 1;
        return read_str(c, &kv->data, &kv->len, "a metadata string");
    }
    if (type == GGUF_ARRAY) return read_array(c, kv);
    kv->count = 1;
    return read_scalar(c, kv->key, type, kv);
}

static int read_tensor_info(cursor *c, gguf_tensor *t, int index)
{
    const unsigned char *name;
    uint64_t nlen;
    uint32_t ndim, type;
    t->info_offset = c->pos;
    if (read_str(c, &name, &nlen, "a tensor name")) return -1;
    if (nlen == 0 || nlen > 255 || memchr(name, 0, nlen))
        return model_errf(c->err, c->errlen, "%s: byte %llu: the name of tensor %d is empty, "
                          "longer than 255 bytes or holds a NUL byte", c->f->path,
                          (unsigned long long)t->info_offset, index);
    if (!(t->name = malloc(nlen + 1)))
        return model_errf(c->err, c->errlen, "%s: out of memory", c->f->path);
    memcpy(t->name, name, nlen);
    t->name[nlen] = 0;
    for (int i = 0; i < index; i++)
        if (strcmp(c->f->tensors[i].name, t->name) == 0)
            return model_errf(c->err, c->errlen, "%s: byte %llu: tensor %s appears twice",
                              c->f->path, (unsigned long long)t->info_offset, t->name);
    uint64_t at = c->pos;
    if (read_u32(c, &ndim, "a tensor's dimension count")) return -1;
    if (ndim < 1 || ndim > GGUF_MAX_DIMS)
        return model_errf(c->err, c->errlen, "%s: byte %llu: tensor %s has %u dimensions (1 to "
                          "%d supported)", c->f->path, (unsigned long long)at, t->name, ndim,
                          GGUF_MAX_DIMS);
    t->ndim = (int)ndim;
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t ne;
        at = c->pos;
        if (read_u64(c, &ne, "a tensor's dimensions")) return -1;
        if (ne == 0 || ne > (uint64_t)INT64_MAX / (uint64_t)t->numel)
            return model_errf(c->err, c->errlen, "%s: byte %llu: tensor %s has dimension %d of "
                              "%llu (zero, or the element count overflows)", c->f->path,
                              (unsigned long long)at, t->name, d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
        t->numel *= (int64_t)ne;
    }
    for (int d = t->ndim; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    at = c->pos;
    if (read_u32(c, &type, "a tensor's type")) return -1;
    t->type = type;
    int64_t bel;
    size_t bbytes;
    if (gguf_type_block(type, &bel, &bbytes))
        return model_errf(c->err, c->errlen, "%s: byte %llu: tensor %s has unknown ggml type %u",
                          c->f->path, (unsigned long long)at, t->name, type);
    if (t->ne[0] % bel)
        return model_errf(c->err, c->errlen, "%s: byte %llu: tensor %s has rows of %lld "
                          "elements, not a whole number of %s blocks of %lld", c->f->path,
                          (unsigned long long)t->info_offset, t->name, (long long)t->ne[0],
                          gguf_type_name(type), (long long)bel);
    uint64_t blocks = (uint64_t)(t->numel / bel);
    if (blocks > SIZE_MAX / bbytes)
        return model_errf(c->err, c->errlen, "%s: byte %llu: tensor %s: byte size overflows",
                          c->f->path, (unsigned long long)t->info_offset, t->name);
    t->nbytes = (size_t)(blocks * bbytes);
    return read_u64(c, &t->offset, "a tensor's offset");
}

/* general.alignment: a u32 power of two (default 32). */
static int find_alignment(gguf_file *f, char *err, size_t errlen)
{
    const gguf_kv *kv = gguf_kv_find(f, "general.alignment");
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (!kv) return 0;
    if (kv->type != GGUF_UINT32)
        return model_errf(err, errlen, "%s: byte %llu: key general.alignment is %s, expected "
                          "uint32", f->path, (unsigned long long)kv->offset,
                          value_type_name(kv->type));
    if (kv->v.u == 0 || (kv->v.u & (kv->v.u - 1)) || kv->v.u > (1u << 24))
        return model_errf(err, errlen, "%s: byte %llu: key general.alignment is %llu, not a "
                          "power of two up to 2^24", f->path, (unsigned long long)kv->offset,
                          (unsigned long long)kv->v.u);
    f->alignment = kv->v.u;
    return 0;
}

static int by_offset(const void *a, const void *b)
{
    const gguf_tensor *x = *(gguf_tensor *const *)a, *y = *(gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Each tensor aligned, inside the file, and none overlapping another. */
static int check_tensor_data(gguf_file *f, char *err, size_t errlen)
{
    uint64_t data_len = f->size > f->data_offset ? f->size - f->data_offset : 0;
    gguf_tensor **order = malloc((size_t)(f->ntensors ? f->ntensors : 1) * sizeof *order);
    int rc = -1;
    if (!order) return model_errf(err, errlen, "%s: out of memory", f->path);
    for (int i = 0; i < f->ntensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        order[i] = t;
        if (t->offset % f->alignment) {
            model_errf(err, errlen, "%s: byte %llu: tensor %s has offset %llu, not a multiple of "
                       "the alignment %llu", f->path, (unsigned long long)t->info_offset, t->name,
                       (unsigned long long)t->offset, (unsigned long long)f->alignment);
            goto out;
        }
        if (t->offset > data_len || t->nbytes > data_len - t->offset) {
            model_errf(err, errlen, "%s: byte %llu: tensor %s (%s, %zu bytes at data offset "
                       "%llu, file byte %llu) runs past the end of the file (%zu bytes)",
                       f->path, (unsigned long long)t->info_offset, t->name,
                       gguf_type_name(t->type), t->nbytes, (unsigned long long)t->offset,
                       (unsigned long long)(f->data_offset + t->offset), f->size);
            goto out;
        }
        t->data = f->map + f->data_offset + t->offset;
    }
    qsort(order, (size_t)f->ntensors, sizeof *order, by_offset);
    for (int i = 1; i < f->ntensors; i++) {
        const gguf_tensor *a = order[i - 1], *b = order[i];
        if (b->offset < a->offset + a->nbytes) {
            model_errf(err, errlen, "%s: byte %llu: tensor %s (data offset %llu) overlaps tensor "
                       "%s (bytes [%llu, %llu))", f->path, (unsigned long long)b->info_offset,
                       b->name, (unsigned long long)b->offset, a->name,
                       (unsigned long long)a->offset,
                       (unsigned long long)(a->offset + a->nbytes));
            goto out;
        }
    }
    rc = 0;
out:
    free(order);
    return rc;
}

static int map_file(gguf_file *f, char *err, size_t errlen)
{
    struct stat st;
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return model_errf(err, errlen, "%s: cannot open: %s", f->path, strerror(errno));
    int rc = -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        model_errf(err, errlen, "%s: not a regular file", f->path);
    } else if (st.st_size < 24) {
        model_errf(err, errlen, "%s: byte 0: file is %lld bytes, shorter than the 24-byte GGUF "
                   "header", f->path, (long long)st.st_size);
    } else {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            model_errf(err, errlen, "%s: cannot map: %s", f->path, strerror(errno));
        } else {
            f->map = m;
            f->size = (size_t)st.st_size;
            rc = 0;
        }
    }
    close(fd);
    return rc;
}

static int parse(gguf_file *f, char *err, size_t errlen)
{
    cursor c = {f, 0, err, errlen};
    uint32_t magic;
    uint64_t ntensors, nkv;
    if (read_u32(&c, &magic, "the magic")) return -1;
    if (magic != 0x46554747u) /* "GGUF" */
        return model_errf(err, errlen, "%s: byte 0: not a GGUF file (magic %02x %02x %02x %02x, "
                          "expected \"GGUF\")", f->path, f->map[0], f->map[1], f->map[2],
                          f->map[3]);
    if (read_u32(&c, &f->version, "the version")) return -1;
    if (f->version != 2 && f->version != 3)
        return model_errf(err, errlen, "%s: byte 4: GGUF version %u is not supported (2 and 3 "
                          "are%s)", f->path, f->version,
                          f->version == 1 ? "; version 1 has 32-bit counts" :
                          (f->version & 0xffff) == 0 ? "; a big-endian file?" : "");
    if (read_u64(&c, &ntensors, "the tensor count") || read_u64(&c, &nkv, "the metadata count"))
        return -1;
    /* A tensor info takes at least 8+1+4+8+4+8 bytes, an entry 8+1+4+1. */
    if (ntensors > f->size / 33 || ntensors > 1u << 20)
        return model_errf(err, errlen, "%s: byte 8: tensor count %llu is absurd for a file of "
                          "%zu bytes", f->path, (unsigned long long)ntensors, f->size);
    if (nkv > f->size / 14 || nkv > 1u << 20)
        return model_errf(err, errlen, "%s: byte 16: metadata count %llu is absurd for a file "
                          "of %zu bytes", f->path, (unsigned long long)nkv, f->size);
    f->kv = calloc((size_t)nkv + 1, sizeof *f->kv);
    f->tensors = calloc((size_t)ntensors + 1, sizeof *f->tensors);
    if (!f->kv || !f->tensors) return model_errf(err, errlen, "%s: out of memory", f->path);
    for (uint64_t i = 0; i < nkv; i++) {
        f->nkv = (int)i + 1; /* so close frees what this entry allocated */
        if (read_kv(&c, &f->kv[i], (int)i)) return -1;
    }
    for (uint64_t i = 0; i < ntensors; i++) {
        f->ntensors = (int)i + 1;
        if (read_tensor_info(&c, &f->tensors[i], (int)i)) return -1;
    }
    if (find_alignment(f, err, errlen)) return -1;
    f->data_offset = (c.pos + f->alignment - 1) / f->alignment * f->alignment;
    return check_tensor_data(f, err, errlen);
}

int gguf_open(gguf_file **out, const char *path, char *err, size_t errlen)
{
    gguf_file *f = calloc(1, sizeof *f);
    *out = NULL;
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return model_errf(err, errlen, "%s: out of memory", path);
    }
    if (map_file(f, err, errlen) || parse(f, err, errlen)) {
        gguf_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

void gguf_close(gguf_file *f)
{
    if (!f) return;
    for (int i = 0; i < f->nkv; i++) {
        free(f->kv[i].key);
        free(f->kv[i].str_at);
    }
    for (int i = 0; i < f->ntensors; i++) free(f->tensors[i].name);
    free(f->kv);
    free(f->tensors);
    if (f->map) munmap((void *)f->map, f->size);
    free(f->path);
    free(f);
}

const char *gguf_path(const gguf_file *f) { return f->path; }
uint32_t gguf_version(const gguf_file *f) { return f->version; }
uint64_t gguf_alignment(const gguf_file *f) { return f->alignment; }
uint64_t gguf_data_offset(const gguf_file *f) { return f->data_offset; }
int gguf_kv_count(const gguf_file *f) { return f->nkv; }
int gguf_tensor_count(const gguf_file *f) { return f->ntensors; }

const gguf_kv *gguf_kv_at(const gguf_file *f, int i)
{
    return i >= 0 && i < f->nkv ? &f->kv[i] : NULL;
}

const gguf_kv *gguf_kv_find(const gguf_file *f, const char *key)
{
    for (int i = 0; i < f->nkv; i++)
        if (f->kv[i].key && strcmp(f->kv[i].key, key) == 0) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_tensor_at(const gguf_file *f, int i)
{
    return i >= 0 && i < f->ntensors ? &f->tensors[i] : NULL;
}

const gguf_tensor *gguf_tensor_find(const gguf_file *f, const char *name)
{
    for (int i = 0; i < f->ntensors; i++)
        if (f->tensors[i].name && strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

/* ---- typed metadata ------------------------------------------------------ */

static const gguf_kv *lookup(const gguf_file *f, const char *key, bool required, char *err,
                             size_t errlen)
{
    const gguf_kv *kv = gguf_kv_find(f, key);
    if (!kv && required) model_errf(err, errlen, "%s: required key %s is missing", f->path, key);
    return kv;
}

int gguf_get_int(const gguf_file *f, const char *key, bool required, int64_t *out, char *err,
                 size_t errlen)
{
    const gguf_kv *kv = lookup(f, key, required, err, errlen);
    if (!kv) return required ? -1 : 1;
    switch (kv->type) {
    case GGUF_INT8: case GGUF_INT16: case GGUF_INT32: case GGUF_INT64:
        *out = kv->v.i;
        return 0;
    case GGUF_UINT8: case GGUF_UINT16: case GGUF_UINT32: case GGUF_UINT64:
        if (kv->v.u > (uint64_t)INT64_MAX) break;
        *out = (int64_t)kv->v.u;
        return 0;
    default:
        return model_errf(err, errlen, "%s: byte %llu: key %s is %s, expected an integer",
                          f->path, (unsigned long long)kv->offset, key,
                          value_type_name(kv->type));
    }
    return model_errf(err, errlen, "%s: byte %llu: key %s is %llu, out of range", f->path,
                      (unsigned long long)kv->offset, key, (unsigned long long)kv->v.u);
}

int gguf_get_float(const gguf_file *f, const char *key, bool required, double *out, char *err,
                   size_t errlen)
{
    const gguf_kv *kv = lookup(f, key, required, err, errlen);
    if (!kv) return required ? -1 : 1;
    if (kv->type != GGUF_FLOAT32 && kv->type != GGUF_FLOAT64)
        return model_errf(err, errlen, "%s: byte %llu: key %s is %s, expected a float", f->path,
                          (unsigned long long)kv->offset, key, value_type_name(kv->type));
    *out = kv->v.f;
    return 0;
}

int gguf_get_string(const gguf_file *f, const char *key, bool required, char **out, char *err,
                    size_t errlen)
{
    const gguf_kv *kv = lookup(f, key, required, err, errlen);
    *out = NULL;
    if (!kv) return required ? -1 : 1;
    if (kv->type != GGUF_STRING)
        return model_errf(err, errlen, "%s: byte %llu: key %s is %s, expected a string",
                          f->path, (unsigned long long)kv->offset, key, value_type_name(kv->type));
    if (memchr(kv->data, 0, kv->len))
        return model_errf(err, errlen, "%s: byte %llu: key %s holds a NUL byte", f->path,
                          (unsigned long long)kv->offset, key);
    if (!(*out = malloc(kv->len + 1))) return model_errf(err, errlen, "%s: out of memory", f->path);
    memcpy(*out, kv->data, kv->len);
    (*out)[kv->len] = 0;
    return 0;
}

void gguf_array_string(const gguf_kv *kv, uint64_t i, const char **s, size_t *len)
{
    const unsigned char *p = kv->data + kv->str_at[i];
    *len = (size_t)get_le(p, 8);
    *s = (const char *)p + 8;
}

int64_t gguf_array_int(const gguf_kv *kv, uint64_t i)
{
    int size = scalar_size(kv->elem_type);
    uint64_t raw = get_le(kv->data + i * (uint64_t)size, size);
    switch (kv->elem_type) {
    case GGUF_INT8: return (int8_t)raw;
    case GGUF_INT16: return (int16_t)raw;
    case GGUF_INT32: return (int32_t)raw;
    default: return (int64_t)raw;
    }
}

int gguf_tensor_read_f32(const gguf_file *f, const gguf_tensor *t, float *dst, char *err,
                         size_t errlen)
{
    if (!gguf_type_supported(t->type))
        return model_errf(err, errlen, "%s: byte %llu: tensor %s has type %s, which is not "
                          "supported (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q4_K Q6_K are)", f->path,
                          (unsigned long long)t->info_offset, t->name, gguf_type_name(t->type));
    if (gguf_dequantize(t->type, t->data, dst, t->numel))
        return model_errf(err, errlen, "%s: tensor %s: cannot dequantize", f->path, t->name);
    return 0;
}

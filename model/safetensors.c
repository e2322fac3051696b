/* safetensors.c — read (mmap) and write .safetensors files.
 *
 * Layout: u64 little-endian header length N, N bytes of JSON (maybe padded
 * with spaces), then the data section. Each header entry is
 * {"dtype", "shape", "data_offsets": [begin, end]} relative to the data
 * section; "__metadata__" is an optional string->string map.
 *
 * Files come from anywhere, so open() validates everything before handing
 * out a pointer: every tensor lies inside the data, has exactly the bytes
 * its shape needs, and the tensors tile the data section with no hole and no
 * overlap (a hole or overlap means a corrupt or hostile file). */
#include "model.h"
#include "model_util.h"
#include "kernels.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* F32 and I32 data are copied with memcpy: the format is little-endian. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

struct safetensors_file {
    char *path;
    void *map;
    size_t map_len;
    const unsigned char *data; /* start of the data section */
    size_t data_len;
    int count;
    safetensors_tensor *tensors; /* header order */
    json_t *meta;                /* __metadata__, validated as string -> string */
};

/* A tensor's byte range, for the coverage check (sorted by begin). */
typedef struct {
    uint64_t begin, end;
    const char *name;
} byte_range;

typedef struct {
    const char *name;
    safetensors_dtype dtype;
    size_t size;
} dtype_info;

static const dtype_info dtypes[] = {
    {"F32", SAFETENSORS_F32, 4}, {"F16", SAFETENSORS_F16, 2}, {"BF16", SAFETENSORS_BF16, 2},
    {"I32", SAFETENSORS_I32, 4}, {"I64", SAFETENSORS_I64, 8},
};
#define NUM_DTYPES (sizeof dtypes / sizeof dtypes[0])

/* Callers may pass any int as a dtype: unknown ones get size 0, name "?". */
static const dtype_info *dtype_of(safetensors_dtype d)
{
    static const dtype_info unknown = {"?", SAFETENSORS_F32, 0};
    for (size_t i = 0; i < NUM_DTYPES; i++)
        if (dtypes[i].dtype == d)
            return &dtypes[i];
    return &unknown;
}

/* "[64, 32]"; "[]" for a scalar. */
static const char *shape_str(char *buf, size_t len, int ndim, const int64_t *shape)
{
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? ", " : "",
                                 (long long)shape[i]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
    return buf;
}

/* numel * elem_size in bytes; -1 if that does not fit in size_t. */
static int shape_nbytes(int ndim, const int64_t *shape, size_t elem_size, size_t *out)
{
    size_t n = elem_size;
    for (int i = 0; i < ndim; i++) {
        uint64_t d = (uint64_t)shape[i];
        if (d != 0 && n > SIZE_MAX / d)
            return -1;
        n *= (size_t)d;
    }
    *out = n;
    return 0;
}

/* ======================= open: mapping ================================== */

static int map_file(safetensors_file *f, char *err, size_t errlen)
{
    struct stat st;
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        model_errf(err, errlen, "%s: cannot open: %s", f->path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        model_errf(err, errlen, "%s: not a regular file", f->path);
    } else if (st.st_size < 8) {
        model_errf(err, errlen, "%s: file is %lld bytes, shorter than the 8-byte header length",
                f->path, (long long)st.st_size);
    } else {
        /* At least 8 bytes: never a 0-byte mapping, even with no data. */
        f->map_len = (size_t)st.st_size;
        f->map = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (f->map == MAP_FAILED) {
            f->map = NULL;
            model_errf(err, errlen, "%s: cannot map: %s", f->path, strerror(errno));
        }
    }
    close(fd); /* a mapping keeps the file alive */
    return f->map ? 0 : -1;
}

/* ======================= open: header JSON ============================== */

/* jansson reports a duplicate key without naming it when the key is long.
 * Its position is the end of the offending key string: rescan up to there
 * to recover the key and its depth (1 = a tensor name). */
static int find_duplicate_key(const char *buf, size_t pos, char *key, size_t keylen)
{
    int depth = 0, in_string = 0, escaped = 0, key_depth = -1;
    size_t start = 0;
    for (size_t i = 0; i < pos; i++) {
        char c = buf[i];
        if (in_string) {
            if (escaped)
                escaped = 0;
            else if (c == '\\')
                escaped = 1;
            else if (c == '"') {
                size_t n = i - start - 1 < keylen - 1 ? i - start - 1 : keylen - 1;
                memcpy(key, buf + start + 1, n);
                key[n] = '\0';
                in_string = 0;
                key_depth = depth;
            }
        } else if (c == '"') {
            in_string = 1;
            start = i;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return key_depth;
}

static json_t *parse_header(const safetensors_file *f, const char *hdr, size_t len, char *err,
                            size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_loadb(hdr, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root && json_error_code(&jerr) == json_error_duplicate_key && jerr.position > 0 &&
        (size_t)jerr.position <= len) {
        char key[256];
        int depth = find_duplicate_key(hdr, (size_t)jerr.position, key, sizeof key);
        if (depth == 1)
            model_errf(err, errlen, "%s: tensor %s appears twice in the header", f->path, key);
        else
            model_errf(err, errlen, "%s: key \"%s\" appears twice in one object of the header "
                    "(line %d, column %d)", f->path, depth < 0 ? "?" : key, jerr.line,
                    jerr.column);
        return NULL;
    }
    if (!root) {
        model_errf(err, errlen, "%s: header is not valid JSON (line %d, column %d): %s", f->path,
                jerr.line, jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        model_errf(err, errlen, "%s: header is %s, expected a JSON object", f->path,
                model_json_kind(root));
        json_decref(root);
        return NULL;
    }
    return root;
}

static int check_metadata(const safetensors_file *f, json_t *meta, char *err, size_t errlen)
{
    const char *key;
    json_t *v;
    if (!json_is_object(meta)) {
        model_errf(err, errlen, "%s: __metadata__ is %s, expected an object of strings", f->path,
                model_json_kind(meta));
        return -1;
    }
    json_object_foreach(meta, key, v) {
        if (!json_is_string(v)) {
            model_errf(err, errlen, "%s: __metadata__ value of \"%s\" is %s, expected a string",
                    f->path, key, model_json_kind(v));
            return -1;
        }
    }
    return 0;
}

/* ======================= open: one entry ================================ */

static int parse_dtype(const safetensors_file *f, const char *name, json_t *v,
                       safetensors_tensor *t, size_t *elem_size, char *err, size_t errlen)
{
    if (!json_is_string(v)) {
        model_errf(err, errlen, "%s: tensor %s has a dtype that is %s, expected a string",
                f->path, name, model_json_kind(v));
        return -1;
    }
    for (size_t i = 0; i < NUM_DTYPES; i++) {
        if (strcmp(json_string_value(v), dtypes[i].name) == 0) {
            t->dtype = dtypes[i].dtype;
            *elem_size = dtypes[i].size;
            return 0;
        }
    }
    model_errf(err, errlen, "%s: tensor %s has unsupported dtype %s (supported: F32 F16 BF16 "
            "I32 I64)", f->path, name, json_string_value(v));
    return -1;
}

static int parse_shape(const safetensors_file *f, const char *name, json_t *v,
                       safetensors_tensor *t, char *err, size_t errlen)
{
    json_t *dim;
    size_t i;
    if (!json_is_array(v)) {
        model_errf(err, errlen, "%s: tensor %s has a shape that is %s, expected a list of "
                "non-negative integers", f->path, name, model_json_kind(v));
        return -1;
    }
    if (json_array_size(v) > SAFETENSORS_MAX_DIMS) {
        model_errf(err, errlen, "%s: tensor %s has %zu dimensions, at most %d are supported",
                f->path, name, json_array_size(v), SAFETENSORS_MAX_DIMS);
        return -1;
    }
    json_array_foreach(v, i, dim) {
        if (!json_is_integer(dim) || json_integer_value(dim) < 0) {
            model_errf(err, errlen, "%s: tensor %s has shape[%zu] that is not a non-negative "
                    "integer", f->path, name, i);
            return -1;
        }
        t->shape[i] = (int64_t)json_integer_value(dim);
    }
    t->ndim = (int)json_array_size(v);
    return 0;
}

static int parse_offsets(const safetensors_file *f, const char *name, json_t *v,
                         byte_range *r, char *err, size_t errlen)
{
    json_t *b = json_array_get(v, 0), *e = json_array_get(v, 1);
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(b) ||
        !json_is_integer(e) || json_integer_value(b) < 0 || json_integer_value(e) < 0) {
        model_errf(err, errlen, "%s: tensor %s has data_offsets that are not two non-negative "
                "integers [begin, end]", f->path, name);
        return -1;
    }
    r->begin = (uint64_t)json_integer_value(b);
    r->end = (uint64_t)json_integer_value(e);
    if (r->begin > r->end) {
        model_errf(err, errlen, "%s: tensor %s has data_offsets [%llu, %llu] with begin after end",
                f->path, name, (unsigned long long)r->begin, (unsigned long long)r->end);
        return -1;
    }
    if (r->end > f->data_len) {
        model_errf(err, errlen, "%s: tensor %s ends at byte %llu, which runs past the end of the "
                "file (data section is %zu bytes)", f->path, name,
                (unsigned long long)r->end, f->data_len);
        return -1;
    }
    return 0;
}

static int check_entry_keys(const safetensors_file *f, const char *name, json_t *entry,
                            char *err, size_t errlen)
{
    static const char *const required[] = {"dtype", "shape", "data_offsets"};
    const char *key;
    json_t *v;
    for (size_t i = 0; i < 3; i++) {
        if (!json_object_get(entry, required[i])) {
            model_errf(err, errlen, "%s: tensor %s has no %s", f->path, name, required[i]);
            return -1;
        }
    }
    json_object_foreach(entry, key, v) {
        if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets")) {
            model_errf(err, errlen, "%s: tensor %s has unknown key \"%s\"", f->path, name, key);
            return -1;
        }
    }
    return 0;
}

static int parse_entry(const safetensors_file *f, const char *name, json_t *entry,
                       safetensors_tensor *t, byte_range *r, char *err, size_t errlen)
{
    size_t elem_size = 0, nbytes;
    char shape[256];
    if (!json_is_object(entry)) {
        model_errf(err, errlen, "%s: tensor %s has an entry that is %s, expected an object",
                f->path, name, model_json_kind(entry));
        return -1;
    }
    if (check_entry_keys(f, name, entry, err, errlen) ||
        parse_dtype(f, name, json_object_get(entry, "dtype"), t, &elem_size, err, errlen) ||
        parse_shape(f, name, json_object_get(entry, "shape"), t, err, errlen) ||
        parse_offsets(f, name, json_object_get(entry, "data_offsets"), r, err, errlen))
        return -1;
    shape_str(shape, sizeof shape, t->ndim, t->shape);
    if (shape_nbytes(t->ndim, t->shape, elem_size, &nbytes)) {
        model_errf(err, errlen, "%s: tensor %s has shape %s whose byte size overflows", f->path,
                name, shape);
        return -1;
    }
    if (nbytes != r->end - r->begin) {
        model_errf(err, errlen, "%s: tensor %s has shape %s and dtype %s (%zu bytes) but "
                "data_offsets [%llu, %llu] span %llu bytes", f->path, name, shape,
                dtype_of(t->dtype)->name, nbytes, (unsigned long long)r->begin,
                (unsigned long long)r->end, (unsigned long long)(r->end - r->begin));
        return -1;
    }
    t->data = f->data + r->begin;
    t->nbytes = nbytes;
    return 0;
}

/* ======================= open: coverage ================================= */

static int compare_ranges(const void *a, const void *b)
{
    const byte_range *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name); /* deterministic messages */
}

/* The header may list entries in any order: sort a copy by offset, then
 * the ranges must follow one another exactly from 0 to the data's end. */
static int check_coverage(const safetensors_file *f, byte_range *r, int n, char *err,
                          size_t errlen)
{
    uint64_t pos = 0;
    qsort(r, (size_t)n, sizeof *r, compare_ranges);
    for (int i = 0; i < n; i++) {
        if (r[i].begin < pos) {
            model_errf(err, errlen, "%s: tensors %s (bytes [%llu, %llu)) and %s (bytes [%llu, "
                    "%llu)) overlap", f->path, r[i - 1].name,
                    (unsigned long long)r[i - 1].begin, (unsigned long long)r[i - 1].end,
                    r[i].name, (unsigned long long)r[i].begin, (unsigned long long)r[i].end);
            return -1;
        }
        if (r[i].begin > pos) {
            if (i == 0)
                model_errf(err, errlen, "%s: bytes [0, %llu) of the data section, before tensor "
                        "%s, belong to no tensor", f->path,
                        (unsigned long long)r[i].begin, r[i].name);
            else
                model_errf(err, errlen, "%s: bytes [%llu, %llu) of the data section, between "
                        "tensors %s and %s, belong to no tensor", f->path,
                        (unsigned long long)pos, (unsigned long long)r[i].begin,
                        r[i - 1].name, r[i].name);
            return -1;
        }
        pos = r[i].end;
    }
    if (pos == f->data_len)
        return 0;
    if (n == 0)
        model_errf(err, errlen, "%s: data section is %zu bytes but the header lists no tensor",
                f->path, f->data_len);
    else
        model_errf(err, errlen, "%s: bytes [%llu, %zu) at the end of the data section, after "
                "tensor %s, belong to no tensor", f->path, (unsigned long long)pos,
                f->data_len, r[n - 1].name);
    return -1;
}

/* ======================= open =========================================== */

static int load_entries(safetensors_file *f, json_t *root, char *err, size_t errlen)
{
    size_t cap = json_object_size(root);
    byte_range *ranges = calloc(cap ? cap : 1, sizeof *ranges);
    const char *key;
    json_t *v;
    int rc = -1;

    f->tensors = calloc(cap ? cap : 1, sizeof *f->tensors);
    if (!ranges || !f->tensors) {
        model_errf(err, errlen, "%s: out of memory reading the header", f->path);
        free(ranges);
        return -1;
    }
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if (check_metadata(f, v, err, errlen))
                goto out;
            f->meta = json_incref(v);
            continue;
        }
        safetensors_tensor *t = &f->tensors[f->count];
        if (parse_entry(f, key, v, t, &ranges[f->count], err, errlen))
            goto out;
        /* Names outlive the JSON document. */
        if (!(t->name = strdup(key))) {
            model_errf(err, errlen, "%s: out of memory reading the header", f->path);
            goto out;
        }
        ranges[f->count].name = t->name;
        f->count++;
    }
    rc = check_coverage(f, ranges, f->count, err, errlen);
out:
    free(ranges);
    return rc;
}

int safetensors_open(safetensors_file **out, const char *path, char *err, size_t errlen)
{
    safetensors_file *f = calloc(1, sizeof *f);
    json_t *root = NULL;
    uint64_t hlen = 0;

    *out = NULL;
    if (!f || !(f->path = strdup(path))) {
        free(f);
        model_errf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    if (map_file(f, err, errlen))
        goto fail;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | ((const unsigned char *)f->map)[i];
    if (hlen > f->map_len - 8) {
        model_errf(err, errlen, "%s: header length %llu is larger than the file (%zu bytes)",
                path, (unsigned long long)hlen, f->map_len);
        goto fail;
    }
    f->data = (const unsigned char *)f->map + 8 + hlen;
    f->data_len = f->map_len - 8 - (size_t)hlen;
    root = parse_header(f, (const char *)f->map + 8, (size_t)hlen, err, errlen);
    if (!root || load_entries(f, root, err, errlen))
        goto fail;
    json_decref(root);
    *out = f;
    return 0;
fail:
    json_decref(root);
    safetensors_close(f);
    return -1;
}

void safetensors_close(safetensors_file *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->count; i++)
        free((char *)f->tensors[i].name);
    free(f->tensors);
    json_decref(f->meta);
    if (f->map)
        munmap(f->map, f->map_len);
    free(f->path);
    free(f);
}

int safetensors_count(const safetensors_file *f) { return f->count; }

const safetensors_tensor *safetensors_at(const safetensors_file *f, int i)
{
    return i >= 0 && i < f->count ? &f->tensors[i] : NULL;
}

const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name)
{
    for (int i = 0; i < f->count; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

const char *safetensors_path(const safetensors_file *f) { return f->path; }

uint64_t safetensors_offset(const safetensors_file *f, const safetensors_tensor *t)
{
    return (uint64_t)((const unsigned char *)t->data - (const unsigned char *)f->map);
}

const char *safetensors_metadata(const safetensors_file *f, const char *key)
{
    return f->meta ? json_string_value(json_object_get(f->meta, key)) : NULL;
}

/* ======================= typed reads ==================================== */

static const safetensors_tensor *find_with_shape(const safetensors_file *f, const char *name,
                                                 int ndim, const int64_t *shape, char *err,
                                                 size_t errlen)
{
    const safetensors_tensor *t = safetensors_find(f, name);
    char have[256], want[256];
    if (!t) {
        model_errf(err, errlen, "%s: tensor %s is missing", f->path, name);
        return NULL;
    }
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (!same) {
        model_errf(err, errlen, "%s: tensor %s has shape %s, expected %s", f->path, name,
                shape_str(have, sizeof have, t->ndim, t->shape),
                shape_str(want, sizeof want, ndim, shape));
        return NULL;
    }
    return t;
}

int safetensors_read_f32(const safetensors_file *f, const char *name, int ndim,
                         const int64_t *shape, float *dst, char *err, size_t errlen)
{
    const safetensors_tensor *t = find_with_shape(f, name, ndim, shape, err, errlen);
    const unsigned char *p;
    if (!t)
        return -1;
    p = t->data;
    switch (t->dtype) {
    case SAFETENSORS_F32:
        if (t->nbytes)
            memcpy(dst, p, t->nbytes);
        return 0;
    case SAFETENSORS_F16:
    case SAFETENSORS_BF16:
        /* Byte by byte: the data may be unaligned. */
        for (size_t i = 0; i < t->nbytes / 2; i++) {
            uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
            dst[i] = t->dtype == SAFETENSORS_F16 ? kernels_f16_to_f32(h)
                                                 : kernels_bf16_to_f32(h);
        }
        return 0;
    default:
        model_errf(err, errlen, "%s: tensor %s has dtype %s, expected F32, F16 or BF16", f->path,
                name, dtype_of(t->dtype)->name);
        return -1;
    }
}

int safetensors_read_i32(const safetensors_file *f, const char *name, int ndim,
                         const int64_t *shape, int32_t *dst, char *err, size_t errlen)
{
    const safetensors_tensor *t = find_with_shape(f, name, ndim, shape, err, errlen);
    const unsigned char *p;
    if (!t)
        return -1;
    p = t->data;
    if (t->dtype == SAFETENSORS_I32) {
        if (t->nbytes)
            memcpy(dst, p, t->nbytes);
        return 0;
    }
    if (t->dtype != SAFETENSORS_I64) {
        model_errf(err, errlen, "%s: tensor %s has dtype %s, expected I32 or I64", f->path, name,
                dtype_of(t->dtype)->name);
        return -1;
    }
    for (size_t i = 0; i < t->nbytes / 8; i++) {
        int64_t v;
        memcpy(&v, p + 8 * i, sizeof v);
        if (v < INT32_MIN || v > INT32_MAX) {
            model_errf(err, errlen, "%s: tensor %s has value %lld at index %zu, outside the "
                    "int32 range", f->path, name, (long long)v, i);
            return -1;
        }
        dst[i] = (int32_t)v;
    }
    return 0;
}

/* ======================= write ========================================== */

static int check_write_entry(const char *path, const safetensors_entry *e, json_t *header,
                             size_t *nbytes, char *err, size_t errlen)
{
    char shape[256];
    if (!e->name || !*e->name || strcmp(e->name, "__metadata__") == 0) {
        model_errf(err, errlen, "%s: tensor name \"%s\" is not allowed", path,
                e->name ? e->name : "(null)");
        return -1;
    }
    if (json_object_get(header, e->name)) {
        model_errf(err, errlen, "%s: tensor %s is listed twice", path, e->name);
        return -1;
    }
    if (e->dtype != SAFETENSORS_F32 && e->dtype != SAFETENSORS_I32) {
        model_errf(err, errlen, "%s: tensor %s has dtype %s; the writer supports F32 and I32",
                path, e->name, dtype_of(e->dtype)->name);
        return -1;
    }
    if (e->ndim < 0 || e->ndim > SAFETENSORS_MAX_DIMS) {
        model_errf(err, errlen, "%s: tensor %s has %d dimensions (0 to %d supported)", path,
                e->name, e->ndim, SAFETENSORS_MAX_DIMS);
        return -1;
    }
    int negative = 0;
    for (int d = 0; d < e->ndim; d++)
        negative |= e->shape[d] < 0;
    if (negative || shape_nbytes(e->ndim, e->shape, dtype_of(e->dtype)->size, nbytes)) {
        model_errf(err, errlen, "%s: tensor %s has invalid shape %s (negative or too large)",
                path, e->name, shape_str(shape, sizeof shape, e->ndim, e->shape));
        return -1;
    }
    if (*nbytes && !e->data) {
        model_errf(err, errlen, "%s: tensor %s has no data", path, e->name);
        return -1;
    }
    return 0;
}

static json_t *shape_json(int ndim, const int64_t *shape)
{
    json_t *a = json_array();
    for (int d = 0; a && d < ndim; d++) {
        if (json_array_append_new(a, json_integer((json_int_t)shape[d]))) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* Builds the header JSON; entries laid out back to back in entry order. */
static char *build_header(const char *path, const safetensors_entry *entries, int n,
                          const char *const *meta, char *err, size_t errlen)
{
    json_t *h = json_object(), *m = json_pack("{s:s}", "format", "pt");
    uint64_t offset = 0;
    char *text = NULL;
    for (; meta && m && meta[0] && meta[1]; meta += 2)
        if (json_object_set_new(m, meta[0], json_string(meta[1]))) {
            model_errf(err, errlen, "%s: metadata %s is not valid UTF-8", path, meta[0]);
            json_decref(m);
            json_decref(h);
            return NULL;
        }
    /* set_new takes the value even when it fails, and refuses NULL. */
    if (!h || json_object_set_new(h, "__metadata__", m)) {
        model_errf(err, errlen, "%s: out of memory building the header", path);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const safetensors_entry *e = &entries[i];
        size_t nbytes;
        if (check_write_entry(path, e, h, &nbytes, err, errlen))
            goto out;
        json_t *entry = json_pack("{s:s,s:o,s:[I,I]}", "dtype", dtype_of(e->dtype)->name,
                                  "shape", shape_json(e->ndim, e->shape), "data_offsets",
                                  (json_int_t)offset, (json_int_t)(offset + nbytes));
        /* set_new fails on a name that is not valid UTF-8, too. */
        if (!entry || json_object_set_new(h, e->name, entry)) {
            model_errf(err, errlen, "%s: cannot encode tensor %s (name not UTF-8?)", path,
                    e->name);
            goto out;
        }
        offset += nbytes;
    }
    text = json_dumps(h, JSON_COMPACT);
    if (!text)
        model_errf(err, errlen, "%s: out of memory encoding the header", path);
out:
    json_decref(h);
    return text;
}

/* Length prefix, header padded with spaces so the data starts 8-aligned
 * (as the reference writer does), then each tensor's bytes. */
static int write_body(atomic_file *fd, const char *header, const safetensors_entry *entries,
                      int n)
{
    size_t hlen = strlen(header), padded = (hlen + 7) / 8 * 8;
    unsigned char prefix[8];
    static const char spaces[] = "       "; /* at most 7 needed */
    for (int i = 0; i < 8; i++)
        prefix[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    if (atomic_file_write(fd, prefix, 8) || atomic_file_write(fd, header, hlen) ||
        atomic_file_write(fd, spaces, padded - hlen))
        return -1;
    for (int i = 0; i < n; i++) {
        const safetensors_entry *e = &entries[i];
        size_t nbytes = 0; /* checked by build_header */
        shape_nbytes(e->ndim, e->shape, dtype_of(e->dtype)->size, &nbytes);
        if (nbytes && atomic_file_write(fd, e->data, nbytes))
            return -1;
    }
    return 0;
}

int safetensors_write(const char *path, const safetensors_entry *entries, int n, char *err,
                      size_t errlen)
{
    return safetensors_write_meta(path, entries, n, NULL, err, errlen);
}

int safetensors_write_meta(const char *path, const safetensors_entry *entries, int n,
                           const char *const *meta, char *err, size_t errlen)
{
    char *header;
    atomic_file f;
    int rc = -1;

    if (n < 0 || (n > 0 && !entries)) {
        model_errf(err, errlen, "%s: invalid tensor list", path);
        return -1;
    }
    if (!(header = build_header(path, entries, n, meta, err, errlen)))
        return -1;
    if (atomic_file_begin(&f, path, err, errlen) == 0) {
        write_body(&f, header, entries, n); /* a failed write is reported by commit */
        rc = atomic_file_commit(&f, err, errlen);
    }
    free(header);
    return rc;
}

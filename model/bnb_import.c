/* bnb_import.c — 4-bit checkpoints saved by bitsandbytes (Linear4bit's
 * state dict through safetensors): a quantized `X.weight` is
 *
 *   X.weight                                  U8  [(n + 1) / 2, 1]  packed codes
 *   X.weight.absmax                           U8  [blocks]          8-bit absmax
 *   X.weight.quant_map                        F32 [16]              NF4 values
 *   X.weight.nested_absmax                    F32 [blocks / 256]
 *   X.weight.nested_quant_map                 F32 [256]             dynamic map
 *   X.weight.quant_state.bitsandbytes__nf4    U8  [len]             JSON
 *
 * with the JSON {"quant_type": "nf4", "blocksize": 64, "dtype": ...,
 * "shape": [out, in], "nested_blocksize": 256, "nested_dtype": "float32",
 * "nested_offset": x} (QuantState.as_dict(packed=True)). Such a file also
 * holds the unquantized tensors (norms, embeddings) in F32/F16/BF16.
 *
 * model/safetensors.c refuses U8, so the container is read here (memory
 * mapped, validated as strictly: every tensor inside the data, the bytes
 * its shape needs, the tensors tiling the data section). Only NF4 with
 * double quantization and blocks of 64 is read; anything else is refused
 * naming the tensor and the field. */
#include "import.h"
#include "model_util.h"

#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "bnb_import.c assumes a little-endian host"
#endif

typedef struct {
    char *name;
    bnb_dtype dtype;
    int ndim;
    int64_t shape[SAFETENSORS_MAX_DIMS];
    const unsigned char *data;
    size_t nbytes;
} bnb_tensor;

struct bnb_file {
    char *path;
    void *map;
    size_t map_len;
    int count;
    bnb_tensor *t;
    bool quantized;     /* some tensor has a quant_state */
};

static const struct {
    const char *name;
    bnb_dtype dtype;
    size_t size;
} dtypes[] = {
    {"F32", BNB_F32, 4}, {"F16", BNB_F16, 2}, {"BF16", BNB_BF16, 2},
    {"I32", BNB_I32, 4}, {"I64", BNB_I64, 8}, {"U8", BNB_U8, 1},
};
#define NDTYPES (sizeof dtypes / sizeof dtypes[0])

static const char *dtype_name(bnb_dtype d)
{
    for (size_t i = 0; i < NDTYPES; i++)
        if (dtypes[i].dtype == d) return dtypes[i].name;
    return "?";
}

/* ======================= the container ================================== */

typedef struct {
    uint64_t begin, end;
    const char *name;
} range;

static int cmp_range(const void *a, const void *b)
{
    const range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int parse_entry(bnb_file *f, const char *name, json_t *e, const unsigned char *data,
                       uint64_t data_len, bnb_tensor *t, range *r, char *err, size_t errlen)
{
    json_t *dt = json_object_get(e, "dtype"), *sh = json_object_get(e, "shape");
    json_t *off = json_object_get(e, "data_offsets");
    if (!json_is_object(e) || json_object_size(e) != 3 || !json_is_string(dt) ||
        !json_is_array(sh) || !json_is_array(off) || json_array_size(off) != 2)
        return model_errf(err, errlen, "%s: tensor %s must be {\"dtype\": string, \"shape\": "
                          "list, \"data_offsets\": [begin, end]} and nothing else", f->path, name);
    size_t esize = 0;
    for (size_t i = 0; i < NDTYPES; i++)
        if (strcmp(json_string_value(dt), dtypes[i].name) == 0) {
            t->dtype = dtypes[i].dtype;
            esize = dtypes[i].size;
        }
    if (!esize)
        return model_errf(err, errlen, "%s: tensor %s has unsupported dtype %s (read: F32 F16 "
                          "BF16 I32 I64 U8)", f->path, name, json_string_value(dt));
    if (json_array_size(sh) > SAFETENSORS_MAX_DIMS)
        return model_errf(err, errlen, "%s: tensor %s has %zu dimensions, at most %d", f->path,
                          name, json_array_size(sh), SAFETENSORS_MAX_DIMS);
    t->ndim = (int)json_array_size(sh);
    uint64_t bytes = esize;
    for (int d = 0; d < t->ndim; d++) {
        json_t *v = json_array_get(sh, (size_t)d);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            (uint64_t)json_integer_value(v) > (UINT64_MAX >> 1) / (bytes ? bytes : 1))
            return model_errf(err, errlen, "%s: tensor %s: shape[%d] must be an integer from 0 "
                              "to the file's size", f->path, name, d);
        t->shape[d] = json_integer_value(v);
        bytes *= (uint64_t)t->shape[d];
    }
    json_t *b = json_array_get(off, 0), *en = json_array_get(off, 1);
    if (!json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 ||
        json_integer_value(en) < json_integer_value(b) ||
        (uint64_t)json_integer_value(en) > data_len)
        return model_errf(err, errlen, "%s: tensor %s: data_offsets must be [begin, end] with "
                          "0 <= begin <= end <= %llu (the data section)", f->path, name,
                          (unsigned long long)data_len);
    r->begin = (uint64_t)json_integer_value(b);
    r->end = (uint64_t)json_integer_value(en);
    if (r->end - r->begin != bytes)
        return model_errf(err, errlen, "%s: tensor %s has dtype %s and %llu bytes of shape, but "
                          "data_offsets cover %llu bytes", f->path, name, dtype_name(t->dtype),
                          (unsigned long long)bytes, (unsigned long long)(r->end - r->begin));
    t->data = data + r->begin;
    t->nbytes = (size_t)bytes;
    return 0;
}

static int check_coverage(const bnb_file *f, range *r, int n, uint64_t data_len, char *err,
                          size_t errlen)
{
    uint64_t pos = 0;
    qsort(r, (size_t)n, sizeof *r, cmp_range);
    for (int i = 0; i < n; i++) {
        if (r[i].begin != pos)
            return model_errf(err, errlen, "%s: tensor %s starts at byte %llu of the data "
                              "section; the tensors before it end at %llu (%s)", f->path,
                              r[i].name, (unsigned long long)r[i].begin,
                              (unsigned long long)pos,
                              r[i].begin < pos ? "overlap" : "hole");
        pos = r[i].end;
    }
    if (pos != data_len)
        return model_errf(err, errlen, "%s: bytes [%llu, %llu) of the data section belong to "
                          "no tensor", f->path, (unsigned long long)pos,
                          (unsigned long long)data_len);
    return 0;
}

static int parse_header(bnb_file *f, const char *json, size_t len, const unsigned char *data,
                        uint64_t data_len, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr), *v;
    const char *key;
    int rc = -1;
    range *r = NULL;
    if (!root)
        return model_errf(err, errlen, "%s: header is not valid JSON (column %d): %s", f->path,
                          jerr.column, jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return model_errf(err, errlen, "%s: header must be a JSON object", f->path);
    }
    size_t cap = json_object_size(root) + 1;
    f->t = calloc(cap, sizeof *f->t);
    r = calloc(cap, sizeof *r);
    if (!f->t || !r) {
        model_errf(err, errlen, "%s: out of memory", f->path);
        goto out;
    }
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(v)) {
                model_errf(err, errlen, "%s: __metadata__ must be an object", f->path);
                goto out;
            }
            continue;
        }
        bnb_tensor *t = &f->t[f->count];
        if (!(t->name = strdup(key))) {
            model_errf(err, errlen, "%s: out of memory", f->path);
            goto out;
        }
        f->count++;
        r[f->count - 1].name = t->name;
        if (parse_entry(f, key, v, data, data_len, t, &r[f->count - 1], err, errlen)) goto out;
        if (strstr(key, ".quant_state.bitsandbytes__")) f->quantized = true;
    }
    rc = check_coverage(f, r, f->count, data_len, err, errlen);
out:
    free(r);
    json_decref(root);
    return rc;
}

int bnb_open(bnb_file **out, const char *path, char *err, size_t errlen)
{
    bnb_file *f = calloc(1, sizeof *f);
    struct stat st;
    int fd = -1;
    *out = NULL;
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return model_errf(err, errlen, "%s: out of memory", path);
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        model_errf(err, errlen, "%s: cannot open", path);
        goto fail;
    }
    if (st.st_size < 8) {
        model_errf(err, errlen, "%s: %lld bytes, too short for a safetensors header", path,
                   (long long)st.st_size);
        goto fail;
    }
    f->map_len = (size_t)st.st_size;
    f->map = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        model_errf(err, errlen, "%s: cannot map", path);
        goto fail;
    }
    close(fd);
    fd = -1;
    const unsigned char *p = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | p[i];
    if (hlen > f->map_len - 8) {
        model_errf(err, errlen, "%s: header length %llu runs past the end of the file (%zu "
                   "bytes)", path, (unsigned long long)hlen, f->map_len);
        goto fail;
    }
    if (parse_header(f, (const char *)p + 8, (size_t)hlen, p + 8 + hlen,
                     f->map_len - 8 - hlen, err, errlen))
        goto fail;
    *out = f;
    return 0;
fail:
    if (fd >= 0) close(fd);
    bnb_close(f);
    return -1;
}

void bnb_close(bnb_file *f)
{
    if (!f) return;
    for (int i = 0; i < f->count; i++) free(f->t[i].name);
    free(f->t);
    if (f->map) munmap(f->map, f->map_len);
    free(f->path);
    free(f);
}

bool bnb_is_quantized_file(const bnb_file *f) { return f->quantized; }
const char *bnb_path(const bnb_file *f) { return f->path; }

static const bnb_tensor *find(const bnb_file *f, const char *name)
{
    for (int i = 0; i < f->count; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

/* ======================= the quant state ================================ */

static const char *const qs_keys[] = {"quant_type", "blocksize", "dtype", "shape",
                                      "nested_blocksize", "nested_dtype", "nested_offset"};

int bnb_parse_quant_state(const char *json, size_t len, const char *tensor,
                          bnb_quant_state *qs, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr), *v;
    const char *key;
    int rc = -1;
    memset(qs, 0, sizeof *qs);
    if (!root)
        return model_errf(err, errlen, "%s: quant_state is not valid JSON (column %d): %s",
                          tensor, jerr.column, jerr.text);
    if (!json_is_object(root)) {
        model_errf(err, errlen, "%s: quant_state must be a JSON object", tensor);
        goto out;
    }
    json_object_foreach(root, key, v) {
        bool known = false;
        for (size_t i = 0; i < sizeof qs_keys / sizeof *qs_keys; i++) known |= !strcmp(key, qs_keys[i]);
        if (!known) {
            model_errf(err, errlen, "%s: quant_state has unknown field \"%s\"", tensor, key);
            goto out;
        }
    }
    for (size_t i = 0; i < sizeof qs_keys / sizeof *qs_keys; i++)
        if (!json_object_get(root, qs_keys[i])) {
            model_errf(err, errlen, "%s: quant_state lacks \"%s\"%s", tensor, qs_keys[i],
                       i >= 4 ? " (only double-quantized NF4 is read)" : "");
            goto out;
        }
    v = json_object_get(root, "quant_type");
    if (!json_is_string(v) || strcmp(json_string_value(v), "nf4")) {
        model_errf(err, errlen, "%s: quant_state.quant_type is %s%s%s, only \"nf4\" is read",
                   tensor, json_is_string(v) ? "\"" : model_json_kind(v),
                   json_is_string(v) ? json_string_value(v) : "", json_is_string(v) ? "\"" : "");
        goto out;
    }
    v = json_object_get(root, "blocksize");
    if (!json_is_integer(v) || json_integer_value(v) != NF4_BLOCK) {
        model_errf(err, errlen, "%s: quant_state.blocksize must be %d", tensor, NF4_BLOCK);
        goto out;
    }
    v = json_object_get(root, "nested_blocksize");
    if (!json_is_integer(v) || json_integer_value(v) != NF4_NESTED_BLOCK) {
        model_errf(err, errlen, "%s: quant_state.nested_blocksize must be %d", tensor,
                   NF4_NESTED_BLOCK);
        goto out;
    }
    v = json_object_get(root, "nested_dtype");
    if (!json_is_string(v) || strcmp(json_string_value(v), "float32")) {
        model_errf(err, errlen, "%s: quant_state.nested_dtype must be \"float32\"", tensor);
        goto out;
    }
    v = json_object_get(root, "dtype");
    static const char *const fdt[] = {"float32", "float16", "bfloat16"};
    qs->dtype = -1;
    for (int i = 0; i < 3; i++)
        if (json_is_string(v) && !strcmp(json_string_value(v), fdt[i])) qs->dtype = i;
    if (qs->dtype < 0) {
        model_errf(err, errlen, "%s: quant_state.dtype must be \"float32\", \"float16\" or "
                   "\"bfloat16\"", tensor);
        goto out;
    }
    v = json_object_get(root, "shape");
    if (!json_is_array(v) || json_array_size(v) != 2 ||
        !json_is_integer(json_array_get(v, 0)) || !json_is_integer(json_array_get(v, 1)) ||
        json_integer_value(json_array_get(v, 0)) < 1 ||
        json_integer_value(json_array_get(v, 1)) < 1 ||
        json_integer_value(json_array_get(v, 0)) > (1 << 30) ||
        json_integer_value(json_array_get(v, 1)) > (1 << 30)) {
        model_errf(err, errlen, "%s: quant_state.shape must be [out, in], two positive "
                   "integers", tensor);
        goto out;
    }
    qs->rows = json_integer_value(json_array_get(v, 0));
    qs->cols = json_integer_value(json_array_get(v, 1));
    v = json_object_get(root, "nested_offset");
    double off = json_number_value(v);
    if (!json_is_number(v) || !isfinite(off) || fabs(off) > 3.4028234663852886e38) {
        model_errf(err, errlen, "%s: quant_state.nested_offset must be a finite fp32 number",
                   tensor);
        goto out;
    }
    qs->offset = (float)off; /* Python writes the fp32 value's exact double */
    rc = 0;
out:
    json_decref(root);
    return rc;
}

/* ======================= a quantized tensor ============================= */

/* Component `suffix` of tensor name: present, dtype, 1-D (or [len, 1] for
 * the codes) of `len` elements. */
static const bnb_tensor *part(const bnb_file *f, const char *name, const char *suffix,
                              bnb_dtype dtype, int64_t len, bool column, char *err,
                              size_t errlen)
{
    char full[1024];
    snprintf(full, sizeof full, "%s%s", name, suffix);
    const bnb_tensor *t = find(f, full);
    if (!t) {
        model_errf(err, errlen, "%s: tensor %s is missing (%s is stored 4-bit)", f->path, full,
                   name);
        return NULL;
    }
    if (t->dtype != dtype) {
        model_errf(err, errlen, "%s: tensor %s has dtype %s, expected %s", f->path, full,
                   dtype_name(t->dtype), dtype_name(dtype));
        return NULL;
    }
    bool ok = column ? t->ndim == 2 && t->shape[0] == len && t->shape[1] == 1
                     : t->ndim == 1 && t->shape[0] == len;
    if (!ok) {
        model_errf(err, errlen, "%s: tensor %s must have shape [%lld%s]", f->path, full,
                   (long long)len, column ? ", 1" : "");
        return NULL;
    }
    return t;
}

bool bnb_is_quantized(const bnb_file *f, const char *name)
{
    char full[1024];
    snprintf(full, sizeof full, "%s.quant_state.bitsandbytes__nf4", name);
    if (find(f, full)) return true;
    snprintf(full, sizeof full, "%s.quant_state.bitsandbytes__fp4", name);
    return find(f, full) != NULL;
}

/* Validates every part of a quantized tensor against [rows, cols]; fills
 * the pointers (into the mapping) when asked. */
static int check_quantized(const bnb_file *f, const char *name, int64_t rows, int64_t cols,
                           bnb_quant_state *qs, const bnb_tensor **p, char *err, size_t errlen)
{
    char full[1024];
    snprintf(full, sizeof full, "%s.quant_state.bitsandbytes__nf4", name);
    const bnb_tensor *t = find(f, full);
    if (!t)
        return model_errf(err, errlen, "%s: tensor %s is stored 4-bit but not as nf4 (only "
                          "bitsandbytes__nf4 is read)", f->path, name);
    if (t->dtype != BNB_U8 || t->ndim != 1)
        return model_errf(err, errlen, "%s: tensor %s must be U8 and 1-D (JSON bytes)",
                          f->path, full);
    snprintf(full, sizeof full, "%s: tensor %s", f->path, name);
    if (bnb_parse_quant_state((const char *)t->data, t->nbytes, full, qs, err, errlen))
        return -1;
    if (qs->rows != rows || qs->cols != cols)
        return model_errf(err, errlen, "%s: tensor %s: quant_state.shape is [%lld, %lld], the "
                          "config says [%lld, %lld]", f->path, name, (long long)qs->rows,
                          (long long)qs->cols, (long long)rows, (long long)cols);
    int64_t n = rows * cols, nb = nf4_blocks(rows, cols), nb2 = nf4_nested_blocks(rows, cols);
    if (!(p[0] = part(f, name, "", BNB_U8, (n + 1) / 2, true, err, errlen)) ||
        !(p[1] = part(f, name, ".absmax", BNB_U8, nb, false, err, errlen)) ||
        !(p[2] = part(f, name, ".quant_map", BNB_F32, 16, false, err, errlen)) ||
        !(p[3] = part(f, name, ".nested_absmax", BNB_F32, nb2, false, err, errlen)) ||
        !(p[4] = part(f, name, ".nested_quant_map", BNB_F32, 256, false, err, errlen)))
        return -1;
    /* bitsandbytes' kernels dequantize with their own NF4 table whatever
     * quant_map says: a different map would be read two ways. */
    if (memcmp(p[2]->data, nf4_table(), 16 * sizeof(float)))
        return model_errf(err, errlen, "%s: tensor %s.quant_map is not the NF4 table", f->path,
                          name);
    for (int k = 3; k <= 4; k++)
        for (size_t i = 0; i < p[k]->nbytes / 4; i++) {
            float x;
            memcpy(&x, p[k]->data + 4 * i, 4);
            if (!isfinite(x))
                return model_errf(err, errlen, "%s: tensor %s%s[%zu] is not finite", f->path,
                                  name, k == 3 ? ".nested_absmax" : ".nested_quant_map", i);
        }
    return 0;
}

int bnb_read_nf4(const bnb_file *f, const char *name, int64_t rows, int64_t cols,
                 nf4_matrix *q, void **buf, char *err, size_t errlen)
{
    bnb_quant_state qs;
    const bnb_tensor *p[5];
    *buf = NULL;
    if (check_quantized(f, name, rows, cols, &qs, p, err, errlen)) return -1;
    if (!(*buf = malloc(nf4_bytes(rows, cols))))
        return model_errf(err, errlen, "%s: tensor %s: out of memory", f->path, name);
    nf4_init(q, rows, cols, *buf);
    memcpy(q->codes, p[0]->data, p[0]->nbytes);
    memcpy(q->absmax_q, p[1]->data, p[1]->nbytes);
    memcpy(q->quant_map, p[2]->data, p[2]->nbytes);
    memcpy(q->nested_absmax, p[3]->data, p[3]->nbytes);
    memcpy(q->nested_map, p[4]->data, p[4]->nbytes);
    q->offset = qs.offset;
    return 0;
}

int bnb_check(const bnb_file *f, const char *name, int ndim, const int64_t *shape, char *err,
              size_t errlen)
{
    bnb_quant_state qs;
    const bnb_tensor *p[5];
    if (bnb_is_quantized(f, name)) {
        if (ndim != 2)
            return model_errf(err, errlen, "%s: tensor %s is stored 4-bit but is not a matrix",
                              f->path, name);
        return check_quantized(f, name, shape[0], shape[1], &qs, p, err, errlen);
    }
    const bnb_tensor *t = find(f, name);
    if (!t) return model_errf(err, errlen, "%s: tensor %s is missing", f->path, name);
    if (t->dtype != BNB_F32 && t->dtype != BNB_F16 && t->dtype != BNB_BF16)
        return model_errf(err, errlen, "%s: tensor %s is %s, not F32, F16, BF16 or 4-bit",
                          f->path, name, dtype_name(t->dtype));
    bool same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same)
        return model_errf(err, errlen, "%s: tensor %s does not have the config's shape [%lld%s",
                          f->path, name, (long long)shape[0], ndim == 2 ? ", ...]" : "]");
    return 0;
}

int bnb_read_f32(const bnb_file *f, const char *name, int ndim, const int64_t *shape,
                 float *dst, char *err, size_t errlen)
{
    if (bnb_check(f, name, ndim, shape, err, errlen)) return -1;
    if (bnb_is_quantized(f, name)) {
        nf4_matrix q;
        void *buf;
        if (bnb_read_nf4(f, name, shape[0], shape[1], &q, &buf, err, errlen)) return -1;
        nf4_dequantize(&q, dst);
        free(buf);
        return 0;
    }
    const bnb_tensor *t = find(f, name);
    size_t n = t->nbytes / (t->dtype == BNB_F32 ? 4 : 2);
    if (t->dtype == BNB_F32) {
        memcpy(dst, t->data, t->nbytes);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(t->data[2 * i] | t->data[2 * i + 1] << 8);
        dst[i] = t->dtype == BNB_F16 ? kernels_f16_to_f32(h) : kernels_bf16_to_f32(h);
    }
    return 0;
}

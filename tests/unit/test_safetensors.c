/* test_safetensors.c — reading and writing .safetensors files.
 *
 * What a user relies on: files we write read back bit for bit; F16/BF16
 * checkpoints from the Hub convert exactly; a damaged or hostile file is
 * refused with one message naming the file and the tensor at fault. The
 * bad files are hand-made byte by byte so each test shows the exact flaw. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

/* ---- helpers --------------------------------------------------------------- */

static char tmp_path[512];

/* A per-process path in the build's temp dir, ending in `name`. */
static const char *path_for(const char *name)
{
    snprintf(tmp_path, sizeof tmp_path, "%s/st_%d_%s", SHARDNODE_TEST_TMP, (int)getpid(),
             name);
    return tmp_path;
}

static void write_bytes(const char *path, const void *buf, size_t len)
{
    FILE *fp = fopen(path, "wb");
    if (!fp || (len && fwrite(buf, 1, len, fp) != len) || fclose(fp) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
}

/* Length prefix + header (unpadded, so data may start unaligned) + data. */
static void write_raw(const char *path, const char *header, const void *data, size_t dlen)
{
    size_t hlen = strlen(header);
    unsigned char *buf = malloc(8 + hlen + dlen);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((unsigned long long)hlen >> (8 * i));
    memcpy(buf + 8, header, hlen);
    if (dlen)
        memcpy(buf + 8 + hlen, data, dlen);
    write_bytes(path, buf, 8 + hlen + dlen);
    free(buf);
}

static size_t read_file(const char *path, unsigned char *buf, size_t cap)
{
    FILE *fp = fopen(path, "rb");
    size_t n = fp ? fread(buf, 1, cap, fp) : 0;
    if (fp)
        fclose(fp);
    return n;
}

/* Opening must fail with a message naming the file and each needle. */
static void expect_open_fail(int line, const char *path, const char *needle1,
                             const char *needle2)
{
    safetensors_file *f = (safetensors_file *)1;
    char err[512] = "";
    int rc = safetensors_open(&f, path, err, sizeof err);
    if (rc == 0 || f != NULL || !strstr(err, path) || !strstr(err, needle1) ||
        (needle2 && !strstr(err, needle2))) {
        failures++;
        fprintf(stderr, "%s:%d: FAIL: expected open to fail naming %s, '%s', '%s'\n"
                "  rc=%d message: %s\n", __FILE__, line, path, needle1,
                needle2 ? needle2 : "", rc, err);
    }
    if (rc == 0)
        safetensors_close(f);
    unlink(path);
}

/* Writes `header` + `dlen` zero bytes of data and expects open to fail. */
static void bad_header(int line, const char *header, size_t dlen, const char *needle1,
                       const char *needle2)
{
    unsigned char zeros[256] = {0};
    const char *path = path_for("x.safetensors");
    write_raw(path, header, zeros, dlen);
    expect_open_fail(line, path, needle1, needle2);
}
#define BAD(header, dlen, n1, n2) bad_header(__LINE__, header, dlen, n1, n2)

static safetensors_file *open_ok(int line, const char *path)
{
    safetensors_file *f = NULL;
    char err[512] = "";
    if (safetensors_open(&f, path, err, sizeof err) != 0) {
        failures++;
        fprintf(stderr, "%s:%d: FAIL: open %s: %s\n", __FILE__, line, path, err);
        return NULL;
    }
    return f;
}
#define OPEN_OK(path) open_ok(__LINE__, path)

/* ---- round trips ------------------------------------------------------------ */

static void test_round_trip(void)
{
    const char *path = path_for("rt.safetensors");
    float a[6] = {1.5f, -2.0f, 0.0f, -0.0f, INFINITY, 3.14159274f}, scalar = 42.0f;
    float c[4] = {1e-40f, -1e30f, 7.0f, 8.0f};
    int32_t ids[5] = {0, -1, 2147483647, -2147483647 - 1, 12345};
    safetensors_entry e[5] = {
        {.name = "model.a", .dtype = SAFETENSORS_F32, .ndim = 2, .shape = {2, 3}, .data = a},
        {.name = "scalar", .dtype = SAFETENSORS_F32, .ndim = 0, .data = &scalar},
        {.name = "ids", .dtype = SAFETENSORS_I32, .ndim = 1, .shape = {5}, .data = ids},
        {.name = "empty", .dtype = SAFETENSORS_F32, .ndim = 2, .shape = {0, 4}, .data = NULL},
        {.name = "c", .dtype = SAFETENSORS_F32, .ndim = 4, .shape = {1, 2, 1, 2}, .data = c},
    };
    char err[512] = "";
    CHECK(safetensors_write(path, e, 5, err, sizeof err) == 0, "%s", err);

    /* The layout the reference implementation writes. */
    unsigned char raw[4096];
    size_t n = read_file(path, raw, sizeof raw);
    unsigned long long hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | raw[i];
    CHECK(hlen % 8 == 0 && 8 + hlen + 24 + 4 + 20 + 16 == n, "hlen %llu size %zu", hlen, n);
    CHECK(memcmp(raw + 8, "{\"__metadata__\":{\"format\":\"pt\"}", 31) == 0, "%.40s", raw + 8);
    CHECK(memcmp(raw + 8 + hlen, a, sizeof a) == 0, "data in entry order");

    safetensors_file *f = OPEN_OK(path);
    if (!f)
        return;
    CHECK(safetensors_count(f) == 5, "count %d", safetensors_count(f));
    CHECK(strcmp(safetensors_path(f), path) == 0, "path");
    for (int i = 0; i < 5 && i < safetensors_count(f); i++)
        CHECK(strcmp(safetensors_at(f, i)->name, e[i].name) == 0, "order %d", i);
    CHECK(safetensors_at(f, 5) == NULL && safetensors_at(f, -1) == NULL, "at out of range");
    CHECK(safetensors_find(f, "nope") == NULL, "find missing");

    const safetensors_tensor *t = safetensors_find(f, "model.a");
    CHECK(t && t->dtype == SAFETENSORS_F32 && t->ndim == 2 && t->shape[0] == 2 &&
          t->shape[1] == 3 && t->nbytes == 24, "model.a metadata");
    t = safetensors_find(f, "empty");
    CHECK(t && t->nbytes == 0 && t->ndim == 2 && t->shape[0] == 0, "empty metadata");

    float got[6];
    int32_t got_ids[5];
    CHECK(safetensors_read_f32(f, "model.a", 2, (int64_t[]){2, 3}, got, err, sizeof err) == 0 &&
          memcmp(got, a, sizeof a) == 0, "model.a %s", err);
    CHECK(safetensors_read_f32(f, "scalar", 0, NULL, got, err, sizeof err) == 0 &&
          got[0] == 42.0f, "scalar %s", err);
    CHECK(safetensors_read_f32(f, "c", 4, (int64_t[]){1, 2, 1, 2}, got, err, sizeof err) == 0 &&
          memcmp(got, c, sizeof c) == 0, "c %s", err);
    CHECK(safetensors_read_f32(f, "empty", 2, (int64_t[]){0, 4}, NULL, err, sizeof err) == 0,
          "empty %s", err);
    CHECK(safetensors_read_i32(f, "ids", 1, (int64_t[]){5}, got_ids, err, sizeof err) == 0 &&
          memcmp(got_ids, ids, sizeof ids) == 0, "ids %s", err);

    /* Wrong dtype for the reader. */
    CHECK(safetensors_read_i32(f, "model.a", 2, (int64_t[]){2, 3}, got_ids, err,
                               sizeof err) != 0 && strstr(err, "model.a"), "%s", err);
    CHECK(safetensors_read_f32(f, "ids", 1, (int64_t[]){5}, got, err, sizeof err) != 0 &&
          strstr(err, "ids") && strstr(err, "I32"), "%s", err);
    safetensors_close(f);
    unlink(path);

    /* No tensors at all: the data section is empty, the file is 8 + N. */
    CHECK(safetensors_write(path, NULL, 0, err, sizeof err) == 0, "%s", err);
    f = OPEN_OK(path);
    CHECK(f && safetensors_count(f) == 0, "empty file");
    safetensors_close(f);
    unlink(path);
}

static void test_shape_and_missing_messages(void)
{
    const char *path = path_for("w.safetensors");
    float w[64] = {0};
    safetensors_entry e = {.name = "model.norm.weight", .dtype = SAFETENSORS_F32, .ndim = 1,
                           .shape = {64}, .data = w};
    char err[512] = "", want[700];
    float dst[96];
    CHECK(safetensors_write(path, &e, 1, err, sizeof err) == 0, "%s", err);
    safetensors_file *f = OPEN_OK(path);
    if (!f)
        return;
    snprintf(want, sizeof want, "%s: tensor model.norm.weight has shape [64], expected [96]",
             path);
    CHECK(safetensors_read_f32(f, "model.norm.weight", 1, (int64_t[]){96}, dst, err,
                               sizeof err) != 0 && strcmp(err, want) == 0, "%s", err);
    CHECK(safetensors_read_f32(f, "model.norm.weight", 2, (int64_t[]){64, 1}, dst, err,
                               sizeof err) != 0 && strstr(err, "expected [64, 1]"), "%s", err);
    snprintf(want, sizeof want, "%s: tensor lm_head.weight is missing", path);
    CHECK(safetensors_read_f32(f, "lm_head.weight", 1, (int64_t[]){64}, dst, err,
                               sizeof err) != 0 && strcmp(err, want) == 0, "%s", err);
    CHECK(safetensors_read_i32(f, "lm_head.weight", 1, (int64_t[]){64}, NULL, err,
                               sizeof err) != 0 && strcmp(err, want) == 0, "%s", err);
    safetensors_close(f);
    unlink(path);
}

/* Known bit patterns, the data deliberately at odd addresses. */
static void test_half_conversions(void)
{
    static const uint16_t f16[] = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x03FF, 0x0400,
                                   0x7C00, 0xFC00, 0x8000, 0x7E00};
    const float f16_want[] = {1.0f, -2.5f, 65504.0f, ldexpf(1, -24), ldexpf(1023, -24),
                              ldexpf(1, -14), INFINITY, -INFINITY, -0.0f, NAN};
    static const uint16_t bf16[] = {0x3F80, 0xC020, 0x477F, 0x7F7F, 0x0001, 0x007F,
                                    0x7F80, 0xFF80, 0x8000, 0x7FC0};
    const float bf16_want[] = {1.0f, -2.5f, 65280.0f, ldexpf(255, 120), ldexpf(1, -133),
                               ldexpf(127, -133), INFINITY, -INFINITY, -0.0f, NAN};
    /* Little-endian bytes. The header length is made odd below, so every
     * tensor starts at an odd address. */
    unsigned char data[2 + 20 + 20 + 8];
    float f32[2] = {-1.25f, 6.0f};
    data[0] = 0x00;
    data[1] = 0x3C;
    for (int i = 0; i < 10; i++) {
        data[2 + 2 * i] = (unsigned char)(f16[i] & 0xff);
        data[3 + 2 * i] = (unsigned char)(f16[i] >> 8);
        data[22 + 2 * i] = (unsigned char)(bf16[i] & 0xff);
        data[23 + 2 * i] = (unsigned char)(bf16[i] >> 8);
    }
    memcpy(data + 42, f32, 8);
    char header[400] =
        "{\"one\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]},"
        "\"h\":{\"dtype\":\"F16\",\"shape\":[2,5],\"data_offsets\":[2,22]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[10],\"data_offsets\":[22,42]},"
        "\"f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[42,50]} }";
    if (strlen(header) % 2 == 0)
        strcat(header, " ");
    const char *path = path_for("half.safetensors");
    write_raw(path, header, data, sizeof data);
    safetensors_file *f = OPEN_OK(path);
    if (!f)
        return;
    float got[10];
    char err[512] = "";
    CHECK(safetensors_read_f32(f, "h", 2, (int64_t[]){2, 5}, got, err, sizeof err) == 0, "%s",
          err);
    for (int i = 0; i < 10; i++) {
        int same = isnan(f16_want[i]) ? isnan(got[i])
                                      : got[i] == f16_want[i] &&
                                            signbit(got[i]) == signbit(f16_want[i]);
        CHECK(same, "F16 0x%04x -> %g, want %g", f16[i], (double)got[i], (double)f16_want[i]);
    }
    CHECK(safetensors_read_f32(f, "b", 1, (int64_t[]){10}, got, err, sizeof err) == 0, "%s",
          err);
    for (int i = 0; i < 10; i++) {
        int same = isnan(bf16_want[i]) ? isnan(got[i])
                                       : got[i] == bf16_want[i] &&
                                             signbit(got[i]) == signbit(bf16_want[i]);
        CHECK(same, "BF16 0x%04x -> %g, want %g", bf16[i], (double)got[i],
              (double)bf16_want[i]);
    }
    CHECK(safetensors_read_f32(f, "f", 1, (int64_t[]){2}, got, err, sizeof err) == 0 &&
          got[0] == -1.25f && got[1] == 6.0f, "unaligned F32 %s", err);
    CHECK(safetensors_read_f32(f, "one", 1, (int64_t[]){1}, got, err, sizeof err) == 0 &&
          got[0] == 1.0f, "%s", err);
    safetensors_close(f);
    unlink(path);
}

static void test_i64(void)
{
    const char *path = path_for("i64.safetensors");
    int64_t v[6] = {1, -5, 2147483647, 7, 8, 3000000000LL};
    write_raw(path,
              "{\"ok\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[0,24]},"
              "\"big\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[24,48]}}",
              v, sizeof v);
    safetensors_file *f = OPEN_OK(path);
    if (!f)
        return;
    int32_t got[3];
    char err[512] = "";
    CHECK(safetensors_read_i32(f, "ok", 1, (int64_t[]){3}, got, err, sizeof err) == 0 &&
          got[0] == 1 && got[1] == -5 && got[2] == 2147483647, "%s", err);
    CHECK(safetensors_read_i32(f, "big", 1, (int64_t[]){3}, got, err, sizeof err) != 0 &&
          strstr(err, path) && strstr(err, "tensor big") && strstr(err, "index 2"), "%s", err);
    safetensors_close(f);
    unlink(path);
}

/* Entries need not be listed in offset order; trailing header spaces are
 * legal; zero-sized tensors may sit anywhere in the tiling. */
static void test_unsorted_and_padded(void)
{
    const char *path = path_for("order.safetensors");
    float data[4] = {1, 2, 3, 4};
    write_raw(path,
              "{\"second\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
              "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,16]},"
              "\"__metadata__\":{\"format\":\"pt\",\"note\":\"x\"},"
              "\"first\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}     ",
              data, sizeof data);
    safetensors_file *f = OPEN_OK(path);
    if (!f)
        return;
    float got[2];
    char err[512] = "";
    CHECK(safetensors_count(f) == 3, "count %d", safetensors_count(f));
    CHECK(safetensors_read_f32(f, "first", 1, (int64_t[]){2}, got, err, sizeof err) == 0 &&
          got[0] == 1 && got[1] == 2, "%s", err);
    CHECK(safetensors_read_f32(f, "second", 1, (int64_t[]){2}, got, err, sizeof err) == 0 &&
          got[0] == 3 && got[1] == 4, "%s", err);
    safetensors_close(f);
    unlink(path);

    /* Only a zero-sized tensor, and a file that ends right after the header. */
    write_raw(path, "{\"z\":{\"dtype\":\"I32\",\"shape\":[3,0],\"data_offsets\":[0,0]}}",
              NULL, 0);
    f = OPEN_OK(path);
    CHECK(f && safetensors_count(f) == 1 && safetensors_at(f, 0)->nbytes == 0, "zero-sized");
    safetensors_close(f);
    write_raw(path, "{}", NULL, 0);
    f = OPEN_OK(path);
    CHECK(f && safetensors_count(f) == 0, "empty header");
    safetensors_close(f);
    unlink(path);
}

/* ---- damaged files --------------------------------------------------------- */

#define T(name, dtype, shape, offsets) \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" offsets "}"

static void test_bad_framing(void)
{
    const char *path = path_for("x.safetensors");
    write_bytes(path, "abc", 3);
    expect_open_fail(__LINE__, path, "shorter than the 8-byte", NULL);
    write_bytes(path, "", 0);
    expect_open_fail(__LINE__, path, "shorter than the 8-byte", NULL);
    unsigned char big[10] = {0xe8, 0x03, 0, 0, 0, 0, 0, 0, '{', '}'}; /* claims 1000 */
    write_bytes(path, big, sizeof big);
    expect_open_fail(__LINE__, path, "header length 1000 is larger than the file", NULL);
    unsigned char huge[10] = {0, 0, 0, 0, 0, 0, 0, 0x80, '{', '}'};
    write_bytes(path, huge, sizeof huge);
    expect_open_fail(__LINE__, path, "larger than the file", NULL);
    unsigned char zero[8] = {0};
    write_bytes(path, zero, sizeof zero);
    expect_open_fail(__LINE__, path, "not valid JSON", NULL);

    char dir[600];
    snprintf(dir, sizeof dir, "%s", SHARDNODE_TEST_TMP);
    safetensors_file *f = NULL;
    char err[512] = "";
    CHECK(safetensors_open(&f, dir, err, sizeof err) != 0 && f == NULL && strstr(err, dir),
          "%s", err);
    CHECK(safetensors_open(&f, "/nonexistent/x.safetensors", err, sizeof err) != 0 &&
          strstr(err, "/nonexistent/x.safetensors"), "%s", err);

    BAD("{\"a\":", 0, "not valid JSON", "line 1");
    BAD("{\n\"a\": {\n\"dtype\" \"F32\"}}", 0, "not valid JSON", "line 3");
    BAD("[1, 2]", 0, "expected a JSON object", NULL);
    BAD("{} x", 0, "not valid JSON", NULL);
}

static void test_bad_entries(void)
{
    BAD("{" T("foo", "F64", "[1]", "[0,8]") "}", 8,
        "x.safetensors: tensor foo has unsupported dtype F64", NULL);
    BAD("{" T("foo", "f32", "[1]", "[0,4]") "}", 4, "tensor foo has unsupported dtype f32",
        NULL);
    BAD("{\"foo\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor foo",
        "dtype");
    BAD("{\"foo\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor foo has no dtype", NULL);
    BAD("{\"foo\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "tensor foo has no shape",
        NULL);
    BAD("{\"foo\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "tensor foo has no data_offsets",
        NULL);
    BAD("{\"foo\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}", 4,
        "tensor foo", "extra");
    BAD("{\"foo\":5}", 0, "tensor foo", "object");
    BAD("{" T("foo", "F32", "5", "[0,4]") "}", 4, "tensor foo", "shape");
    BAD("{" T("foo", "F32", "[-1]", "[0,4]") "}", 4, "tensor foo", "shape");
    BAD("{" T("foo", "F32", "[2.5]", "[0,4]") "}", 4, "tensor foo", "shape");
    BAD("{" T("foo", "F32", "[\"1\"]", "[0,4]") "}", 4, "tensor foo", "shape");
    BAD("{" T("foo", "F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", 4, "tensor foo",
        "9 dimensions");
    BAD("{" T("foo", "F32", "[1]", "[0]") "}", 4, "tensor foo", "data_offsets");
    BAD("{" T("foo", "F32", "[1]", "[0,4,8]") "}", 4, "tensor foo", "data_offsets");
    BAD("{" T("foo", "F32", "[1]", "[\"0\",4]") "}", 4, "tensor foo", "data_offsets");
    BAD("{" T("foo", "F32", "[1]", "[-4,0]") "}", 4, "tensor foo", "data_offsets");
    BAD("{" T("foo", "F32", "[1]", "[0,4.0]") "}", 4, "tensor foo", "data_offsets");
    BAD("{" T("foo", "F32", "[1]", "\"0-4\"") "}", 4, "tensor foo", "data_offsets");
    BAD("{" T("foo", "F32", "[0]", "[4,0]") "}", 4, "tensor foo", "begin after end");
    BAD("{" T("foo", "F32", "[4]", "[0,16]") "}", 12, "tensor foo",
        "runs past the end of the file (data section is 12 bytes)");
    BAD("{" T("foo", "F32", "[3]", "[0,16]") "}", 16, "tensor foo", "16 bytes");
    BAD("{" T("foo", "F16", "[4]", "[0,4]") "}", 4, "tensor foo", "8 bytes");
    /* numel * size overflows 64 bits: refused, not wrapped around */
    BAD("{" T("foo", "F32", "[4611686018427387904,4611686018427387904]", "[0,0]") "}", 0,
        "tensor foo", "overflows");
    BAD("{" T("foo", "I64", "[2305843009213693952]", "[0,0]") "}", 0, "tensor foo",
        "overflows");
    BAD("{\"__metadata__\":{\"format\":1}}", 0, "__metadata__", "format");
    BAD("{\"__metadata__\":[\"pt\"]}", 0, "__metadata__", NULL);
}

static void test_truncated_body(void)
{
    const char *path = path_for("x.safetensors");
    float w[16] = {0};
    safetensors_entry e[2] = {
        {.name = "a", .dtype = SAFETENSORS_F32, .ndim = 1, .shape = {8}, .data = w},
        {.name = "model.layers.0.mlp.up_proj.weight", .dtype = SAFETENSORS_F32, .ndim = 2,
         .shape = {2, 4}, .data = w + 8},
    };
    char err[512] = "";
    unsigned char raw[4096];
    CHECK(safetensors_write(path, e, 2, err, sizeof err) == 0, "%s", err);
    size_t n = read_file(path, raw, sizeof raw);
    write_bytes(path, raw, n - 4);
    expect_open_fail(__LINE__, path, "tensor model.layers.0.mlp.up_proj.weight",
                     "runs past the end of the file (data section is 60 bytes)");
}

static void test_tiling(void)
{
    BAD("{" T("a", "F32", "[2]", "[0,8]") "," T("b", "F32", "[2]", "[4,12]") "}", 12,
        "tensors a", "and b (bytes [4, 12)) overlap");
    /* listed in reverse order, same verdict */
    BAD("{" T("b", "F32", "[2]", "[4,12]") "," T("a", "F32", "[2]", "[0,8]") "}", 12,
        "tensors a", "and b (bytes [4, 12)) overlap");
    BAD("{" T("a", "F32", "[2]", "[0,8]") "," T("b", "F32", "[2]", "[0,8]") "}", 8, "a",
        "overlap");
    BAD("{" T("a", "F32", "[1]", "[0,4]") "," T("b", "F32", "[1]", "[8,12]") "}", 12,
        "between tensors a and b", "belong to no tensor");
    BAD("{" T("a", "F32", "[1]", "[4,8]") "}", 8, "before tensor a", "belong to no tensor");
    BAD("{" T("a", "F32", "[1]", "[0,4]") "}", 8, "after tensor a", "belong to no tensor");
    BAD("{}", 4, "data section is 4 bytes", "no tensor");
    BAD("{\"__metadata__\":{\"format\":\"pt\"}}", 8, "no tensor", NULL);
}

static void test_duplicates(void)
{
    BAD("{" T("foo", "F32", "[1]", "[0,4]") "," T("foo", "F32", "[1]", "[4,8]") "}", 8,
        "tensor foo appears twice", NULL);
    /* jansson's own message omits keys this long */
    BAD("{" T("model.layers.3.mlp.up_proj.weight", "F32", "[1]", "[0,4]") ",\n  "
        T("model.layers.3.mlp.up_proj.weight", "F32", "[1]", "[4,8]") "}", 8,
        "tensor model.layers.3.mlp.up_proj.weight appears twice", NULL);
    BAD("{\"a\\\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"a\\\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
        "appears twice", NULL);
    BAD("{\"foo\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
        4, "\"dtype\" appears twice", NULL);
}

/* ---- writer errors ----------------------------------------------------------- */

static void expect_write_fail(int line, const char *path, const safetensors_entry *e, int n,
                              const char *needle)
{
    char err[512] = "";
    int rc = safetensors_write(path, e, n, err, sizeof err);
    if (rc == 0 || !strstr(err, path) || !strstr(err, needle)) {
        failures++;
        fprintf(stderr, "%s:%d: FAIL: expected write to fail naming %s and '%s'\n"
                "  rc=%d message: %s\n", __FILE__, line, path, needle, rc, err);
    }
}

static void test_write_errors(void)
{
    const char *path = path_for("keep.safetensors");
    char tmp[600], err[512] = "";
    float w[4] = {1, 2, 3, 4};
    unsigned char before[4096], after[4096];
    safetensors_entry good = {.name = "w", .dtype = SAFETENSORS_F32, .ndim = 1,
                              .shape = {4}, .data = w};
    CHECK(safetensors_write(path, &good, 1, err, sizeof err) == 0, "%s", err);
    size_t n_before = read_file(path, before, sizeof before);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);

    safetensors_entry e[2] = {good, good};
    e[1].name = "half";
    e[1].dtype = SAFETENSORS_F16;
    expect_write_fail(__LINE__, path, e, 2, "tensor half has dtype F16");
    e[1] = good;
    expect_write_fail(__LINE__, path, e, 2, "tensor w");
    e[1].name = "__metadata__";
    expect_write_fail(__LINE__, path, e, 2, "__metadata__");
    e[1] = good;
    e[1].name = "neg";
    e[1].shape[0] = -4;
    expect_write_fail(__LINE__, path, e, 2, "tensor neg");
    e[1].shape[0] = 4;
    e[1].ndim = SAFETENSORS_MAX_DIMS + 1;
    expect_write_fail(__LINE__, path, e, 2, "tensor neg");
    e[1].ndim = 1;
    e[1].data = NULL;
    expect_write_fail(__LINE__, path, e, 2, "tensor neg");
    e[1].data = w;
    e[1].name = "bad\xff";
    expect_write_fail(__LINE__, path, e, 2, "UTF-8");

    size_t n_after = read_file(path, after, sizeof after);
    CHECK(n_after == n_before && memcmp(before, after, n_before) == 0,
          "existing file changed by failed writes");
    CHECK(access(tmp, F_OK) != 0, "temp file left behind");

    char nodir[700];
    snprintf(nodir, sizeof nodir, "%s.missing-dir/m.safetensors", path);
    CHECK(safetensors_write(nodir, &good, 1, err, sizeof err) != 0 && strstr(err, nodir), "%s",
          err);
    unlink(path);
}

int main(void)
{
    test_round_trip();
    test_shape_and_missing_messages();
    test_half_conversions();
    test_i64();
    test_unsorted_and_padded();
    test_bad_framing();
    test_bad_entries();
    test_truncated_body();
    test_tiling();
    test_duplicates();
    test_write_errors();
    if (failures) {
        fprintf(stderr, "test_safetensors: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_safetensors: ok\n");
    return 0;
}

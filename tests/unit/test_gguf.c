/* test_gguf.c — the GGUF reader (model/gguf.c) and ggml's types
 * (model/gguf_quant.c): files built byte by byte, one block of every
 * dequantized type decoded to values computed here from the unpacked
 * numbers, and every refusal naming what is wrong. */
#include "import.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "gguf_fixture.h"

static char tmp_path[512];

static const char *path_for(const char *name)
{
    snprintf(tmp_path, sizeof tmp_path, "%s/gguf_%d_%s", SHARDNODE_TEST_TMP, (int)getpid(), name);
    return tmp_path;
}

/* Opens b written to a file; expects a refusal containing each of the
 * NULL-terminated strings in want (and the file's path). */
static void expect_refusal(const gbuf *b, const char *name, const char *const *want)
{
    const char *path = path_for(name);
    char err[512] = "";
    gguf_file *f = NULL;
    CHECK(gb_write(b, path) == 0, "write %s", path);
    int rc = gguf_open(&f, path, err, sizeof err);
    CHECK(rc == -1 && f == NULL, "%s: accepted", name);
    CHECK(strstr(err, path) != NULL, "%s: message does not name the file: %s", name, err);
    for (; *want; want++)
        CHECK(strstr(err, *want) != NULL, "%s: message lacks \"%s\": %s", name, *want, err);
    gguf_close(f);
    unlink(path);
}

/* A valid file: three metadata entries, one F32 tensor [4] at offset 0. */
static void valid_file(gbuf *b, uint32_t alignment)
{
    uint64_t ne[1] = {4};
    memset(b, 0, sizeof *b);
    gb_header(b, 3, 1, 3);
    gb_kv_str(b, "general.architecture", "llama");
    gb_kv_u32(b, "general.alignment", alignment);
    const char *toks[] = {"a", "bc", ""};
    gb_kv_strs(b, "tokenizer.ggml.tokens", toks, 3);
    gb_tensor(b, "t", 1, ne, GGML_F32, 0);
    gb_align(b, alignment);
    for (int i = 0; i < 4; i++) gb_f32(b, (float)i + 0.5f);
}

static void test_valid(void)
{
    gbuf b;
    char err[512];
    gguf_file *f;
    valid_file(&b, 64);
    const char *path = path_for("valid.gguf");
    gb_write(&b, path);
    CHECK(gguf_open(&f, path, err, sizeof err) == 0, "open: %s", err);
    if (!f) return;
    CHECK(gguf_version(f) == 3 && gguf_alignment(f) == 64 && gguf_data_offset(f) % 64 == 0,
          "version %u alignment %llu", gguf_version(f), (unsigned long long)gguf_alignment(f));
    CHECK(gguf_kv_count(f) == 3 && gguf_tensor_count(f) == 1, "counts");
    char *s = NULL;
    CHECK(gguf_get_string(f, "general.architecture", true, &s, err, sizeof err) == 0 && s &&
          strcmp(s, "llama") == 0, "architecture");
    free(s);
    int64_t v = 0;
    CHECK(gguf_get_int(f, "general.alignment", true, &v, err, sizeof err) == 0 && v == 64, "int");
    CHECK(gguf_get_int(f, "nope", false, &v, err, sizeof err) == 1 && v == 64, "optional absent");
    CHECK(gguf_get_int(f, "nope", true, &v, err, sizeof err) == -1 && strstr(err, "nope"),
          "required absent: %s", err);
    CHECK(gguf_get_int(f, "general.architecture", true, &v, err, sizeof err) == -1 &&
          strstr(err, "general.architecture") && strstr(err, "string"), "type: %s", err);
    const gguf_kv *kv = gguf_kv_find(f, "tokenizer.ggml.tokens");
    const char *str;
    size_t len;
    CHECK(kv && kv->count == 3, "array");
    if (kv) {
        gguf_array_string(kv, 1, &str, &len);
        CHECK(len == 2 && memcmp(str, "bc", 2) == 0, "array string");
        gguf_array_string(kv, 2, &str, &len);
        CHECK(len == 0, "empty string");
    }
    const gguf_tensor *t = gguf_tensor_find(f, "t");
    float out[4];
    CHECK(t && t->numel == 4 && t->nbytes == 16, "tensor");
    if (t) {
        CHECK(gguf_tensor_read_f32(f, t, out, err, sizeof err) == 0, "read: %s", err);
        CHECK(out[0] == 0.5f && out[3] == 3.5f, "values %g %g", out[0], out[3]);
    }
    gguf_close(f);
    unlink(path);
    free(b.p);
}

static uint16_t f16_bits(float x)
{
    /* Exact for the values used here (small powers of two and their sums). */
    uint32_t u;
    memcpy(&u, &x, 4);
    if (x == 0) return 0;
    int e = (int)((u >> 23) & 255) - 127 + 15;
    return (uint16_t)((u >> 16 & 0x8000) | (unsigned)e << 10 | (u >> 13 & 0x3ff));
}

static void check_block(uint32_t type, const unsigned char *blk, const float *want, int n)
{
    float *got = malloc((size_t)n * sizeof *got);
    CHECK(gguf_dequantize(type, blk, got, n) == 0, "%s: dequantize", gguf_type_name(type));
    int bad = 0;
    for (int i = 0; i < n && !bad; i++)
        if (memcmp(&got[i], &want[i], 4) != 0) {
            CHECK(0, "%s: value %d is %.9g, expected %.9g", gguf_type_name(type), i, got[i],
                  want[i]);
            bad = 1;
        }
    free(got);
}

static void test_types(void)
{
    unsigned char blk[256];
    float want[256];
    uint16_t h;

    /* F16, BF16 */
    uint16_t halves[3] = {0x3c00, 0xc000, 0x0001};
    float hw[3] = {1.0f, -2.0f, ldexpf(1, -24)};
    check_block(GGML_F16, (unsigned char *)halves, hw, 3);
    uint16_t bf[2] = {0x3f80, 0xc0a0};
    float bw[2] = {1.0f, -5.0f};
    check_block(GGML_BF16, (unsigned char *)bf, bw, 2);

    /* Q8_0: d = 0.5, q = j - 16 */
    h = f16_bits(0.5f);
    memcpy(blk, &h, 2);
    for (int j = 0; j < 32; j++) {
        blk[2 + j] = (unsigned char)(int8_t)(j - 16);
        want[j] = 0.5f * (float)(j - 16);
    }
    check_block(GGML_Q8_0, blk, want, 32);

    /* Q4_0: d = 2, value j in the low nibble of qs[j], j+16 in the high one */
    h = f16_bits(2.0f);
    memcpy(blk, &h, 2);
    for (int j = 0; j < 16; j++) {
        int lo = j, hi = 15 - j;
        blk[2 + j] = (unsigned char)(lo | hi << 4);
        want[j] = 2.0f * (float)(lo - 8);
        want[j + 16] = 2.0f * (float)(hi - 8);
    }
    check_block(GGML_Q4_0, blk, want, 32);

    /* Q4_1: d = 0.5, m = -1 */
    h = f16_bits(0.5f);
    memcpy(blk, &h, 2);
    h = f16_bits(-1.0f);
    memcpy(blk + 2, &h, 2);
    for (int j = 0; j < 16; j++) {
        int lo = (j * 3) & 15, hi = (j * 5 + 1) & 15;
        blk[4 + j] = (unsigned char)(lo | hi << 4);
        want[j] = 0.5f * (float)lo + -1.0f;
        want[j + 16] = 0.5f * (float)hi + -1.0f;
    }
    check_block(GGML_Q4_1, blk, want, 32);

    /* Q4_K: d = 0.25, dmin = 0.125; 6-bit scales and mins packed in 12 bytes */
    memset(blk, 0, 144);
    float d = 0.25f, dmin = 0.125f;
    h = f16_bits(d);
    memcpy(blk, &h, 2);
    h = f16_bits(dmin);
    memcpy(blk + 2, &h, 2);
    int sc[8], mn[8];
    unsigned char *scales = blk + 4, *qs = blk + 16;
    for (int s = 0; s < 8; s++) {
        sc[s] = (10 + 7 * s) & 63;
        mn[s] = (63 - 5 * s) & 63;
        if (s < 4) {
            scales[s] |= (unsigned char)sc[s];
            scales[s + 4] |= (unsigned char)mn[s];
        } else {
            scales[s + 4] |= (unsigned char)((sc[s] & 15) | (mn[s] & 15) << 4);
            scales[s - 4] |= (unsigned char)((sc[s] >> 4) << 6);
            scales[s] |= (unsigned char)((mn[s] >> 4) << 6);
        }
    }
    for (int s = 0; s < 8; s++)
        for (int l = 0; l < 32; l++) {
            int q = (s * 3 + l) & 15;
            qs[32 * (s / 2) + l] |= (unsigned char)(q << (4 * (s & 1)));
            want[32 * s + l] = (d * (float)sc[s]) * (float)q - dmin * (float)mn[s];
        }
    check_block(GGML_Q4_K, blk, want, 256);

    /* Q6_K: ql[128] qh[64] scales[16] d; q = (7i mod 64) - 32 */
    memset(blk, 0, 210);
    d = 0.25f;
    h = f16_bits(d);
    memcpy(blk + 208, &h, 2);
    for (int k = 0; k < 16; k++) blk[192 + k] = (unsigned char)(int8_t)(k - 8);
    for (int i = 0; i < 256; i++) {
        int q = (7 * i) % 64, hh = i / 128, g = (i % 128) / 32, l = i % 32;
        blk[64 * hh + l + 32 * (g & 1)] |= (unsigned char)((q & 15) << (g < 2 ? 0 : 4));
        blk[128 + 32 * hh + l] |= (unsigned char)((q >> 4) << (2 * g));
        want[i] = (d * (float)(i / 16 - 8)) * (float)(q - 32);
    }
    check_block(GGML_Q6_K, blk, want, 256);

    /* Names, sizes, what is not read */
    int64_t el;
    size_t by;
    CHECK(gguf_type_block(GGML_Q4_K, &el, &by) == 0 && el == 256 && by == 144, "Q4_K size");
    CHECK(gguf_type_block(GGML_Q6_K, &el, &by) == 0 && el == 256 && by == 210, "Q6_K size");
    CHECK(gguf_type_block(4, &el, &by) == -1 && gguf_type_name(4) == NULL, "retired type 4");
    CHECK(!gguf_type_supported(13) && strcmp(gguf_type_name(13), "Q5_K") == 0, "Q5_K");
    CHECK(gguf_dequantize(GGML_Q8_0, blk, want, 31) == -1, "partial block refused");
}

static void test_refusals(void)
{
    gbuf b;
    uint64_t ne[2] = {4, 1};

    /* Shorter than a header */
    memset(&b, 0, sizeof b);
    gb_put(&b, "GGUF", 4);
    gb_u32(&b, 3);
    gb_u64(&b, 0);
    expect_refusal(&b, "short.gguf", (const char *[]){"byte 0", "shorter than the 24-byte", NULL});
    free(b.p);

    /* Bad magic, version 1, big-endian version */
    memset(&b, 0, sizeof b);
    gb_put(&b, "GGML", 4);
    gb_u32(&b, 3);
    gb_u64(&b, 0);
    gb_u64(&b, 0);
    expect_refusal(&b, "magic.gguf", (const char *[]){"byte 0", "not a GGUF file", NULL});
    memcpy(b.p, "GGUF", 4);
    b.p[4] = 1;
    expect_refusal(&b, "v1.gguf", (const char *[]){"byte 4", "version 1", NULL});
    b.p[4] = 0, b.p[7] = 3;
    expect_refusal(&b, "be.gguf", (const char *[]){"byte 4", "big-endian", NULL});
    free(b.p);

    /* Truncated inside a metadata entry */
    valid_file(&b, 32);
    b.n = 60;
    expect_refusal(&b, "trunc.gguf", (const char *[]){"file ends inside", NULL});
    free(b.p);

    /* Absurd counts */
    memset(&b, 0, sizeof b);
    gb_header(&b, 3, (uint64_t)1 << 40, 0);
    expect_refusal(&b, "ntensors.gguf", (const char *[]){"byte 8", "tensor count 1099511627776", NULL});
    b.n = 0;
    gb_header(&b, 3, 0, (uint64_t)-1);
    expect_refusal(&b, "nkv.gguf", (const char *[]){"byte 16", "metadata count", NULL});
    free(b.p);

    /* A string longer than the file, an array larger than the file */
    memset(&b, 0, sizeof b);
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, 1000);
    gb_put(&b, "abc", 3);
    expect_refusal(&b, "longkey.gguf", (const char *[]){"byte 24", "length 1000", NULL});
    b.n = 0;
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "k");
    gb_u32(&b, 9);
    gb_u32(&b, 4);
    gb_u64(&b, (uint64_t)1 << 60);
    expect_refusal(&b, "bigarray.gguf", (const char *[]){"key k", "cannot fit", NULL});
    free(b.p);

    /* Unknown value type, duplicate key, bad alignment */
    memset(&b, 0, sizeof b);
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "weird");
    gb_u32(&b, 13);
    gb_u32(&b, 0);
    expect_refusal(&b, "vtype.gguf", (const char *[]){"key weird", "unknown value type 13", NULL});
    b.n = 0;
    gb_header(&b, 3, 0, 2);
    gb_kv_u32(&b, "a.b", 1);
    gb_kv_u32(&b, "a.b", 2);
    expect_refusal(&b, "dupkey.gguf", (const char *[]){"key a.b appears twice", NULL});
    b.n = 0;
    gb_header(&b, 3, 0, 1);
    gb_kv_u32(&b, "general.alignment", 48);
    expect_refusal(&b, "align.gguf", (const char *[]){"general.alignment", "48", "power of two", NULL});
    free(b.p);

    /* Tensors: unknown type, misaligned offset, data past the end, overlap,
     * rows not whole blocks, too many dimensions, duplicate name */
    struct { const char *file; uint32_t type; uint64_t off; int ndim; uint64_t ne0;
             const char *want1, *want2; } cases[] = {
        {"ttype.gguf", 99, 0, 2, 4, "tensor w", "unknown ggml type 99"},
        {"tmisal.gguf", GGML_F32, 4, 2, 4, "tensor w", "not a multiple of the alignment 32"},
        {"tpast.gguf", GGML_F32, 64, 2, 4, "tensor w", "runs past the end of the file"},
        {"tblocks.gguf", GGML_Q8_0, 0, 2, 4, "tensor w", "not a whole number of Q8_0 blocks"},
        {"tdims.gguf", GGML_F32, 0, 5, 4, "tensor w", "5 dimensions"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t dims[5] = {cases[i].ne0, 1, 1, 1, 1};
        memset(&b, 0, sizeof b);
        gb_header(&b, 3, 1, 0);
        gb_tensor(&b, "w", cases[i].ndim, dims, cases[i].type, cases[i].off);
        gb_align(&b, 32);
        for (int k = 0; k < 4; k++) gb_f32(&b, 1.0f);
        expect_refusal(&b, cases[i].file, (const char *[]){"byte ", cases[i].want1,
                                                          cases[i].want2, NULL});
        free(b.p);
    }
    memset(&b, 0, sizeof b);
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "a", 2, ne, GGML_F32, 0);
    gb_tensor(&b, "b", 2, ne, GGML_F32, 0);
    gb_align(&b, 32);
    for (int k = 0; k < 8; k++) gb_f32(&b, 1.0f);
    expect_refusal(&b, "overlap.gguf", (const char *[]){"overlaps tensor", NULL});
    b.n = 0;
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "a", 2, ne, GGML_F32, 0);
    gb_tensor(&b, "a", 2, ne, GGML_F32, 32);
    gb_align(&b, 32);
    for (int k = 0; k < 16; k++) gb_f32(&b, 1.0f);
    expect_refusal(&b, "dupname.gguf", (const char *[]){"tensor a appears twice", NULL});
    b.n = 0;
    uint64_t huge[2] = {(uint64_t)1 << 62, 8};
    gb_header(&b, 3, 1, 0);
    gb_tensor(&b, "h", 2, huge, GGML_F32, 0);
    expect_refusal(&b, "overflow.gguf", (const char *[]){"tensor h", "overflows", NULL});
    free(b.p);
}

int main(void)
{
    test_valid();
    test_types();
    test_refusals();
    if (failures) printf("%d checks failed\n", failures);
    else printf("test_gguf: all checks passed\n");
    return failures != 0;
}

/* test_nf4.c — NF4 (kernels/cpu/nf4*.c) and bitsandbytes 4-bit files
 * (model/bnb_import.c).
 *
 * Without arguments: the unit tests (packing order, tie-breaking, zero and
 * odd-sized blocks, memory accounting, the NF4 products bit-identical to
 * matmul on the dequantized weight with 1, 2 and 3 threads, quant_state
 * and file refusals). With arguments it is the driver of
 * tests/reference/nf4_ref.py:
 *   test_nf4 quantize IN.f32 ROWS COLS OUTDIR   codes.u8 absmax_q.u8
 *            nested.f32 offset.f32 absmax.f32 deq.f32 map8.f32 into OUTDIR
 *   test_nf4 hfread DIR NAME OUT.f32            hf_read_f32 of an HF directory
 *   test_nf4 hfcheck DIR                        hf_check */
#include "check.h"
#include "import.h"
#include "kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) /* N(0,1)-ish, seeded */
{
    float s = 0.0f;
    for (int k = 0; k < 4; k++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        s += (float)(rng >> 40) / (float)(1 << 24) - 0.5f;
    }
    return s * 1.7f;
}

/* An NF4 matrix of w in a malloc'ed buffer (*buf). */
static nf4_matrix quantize(const float *w, int64_t rows, int64_t cols, void **buf)
{
    nf4_matrix q;
    *buf = malloc(nf4_bytes(rows, cols));
    float *absmax = malloc((size_t)nf4_blocks(rows, cols) * sizeof *absmax + 4);
    nf4_init(&q, rows, cols, *buf);
    nf4_quantize(&q, w, absmax);
    free(absmax);
    return q;
}

static void test_packing(void)
{
    /* absmax 1: codes 15, 0, 7 (zero), 12 (0.5 lies below the 0.44/0.56 midpoint 0.5017) */
    float w[4] = {1.0f, -1.0f, 0.0f, 0.5f};
    void *buf;
    nf4_matrix q = quantize(w, 1, 4, &buf);
    CHECK(q.codes[0] == 0xF0 && q.codes[1] == 0x7C, "packing: %02x %02x, want f0 7c",
          q.codes[0], q.codes[1]);
    free(buf);
    /* odd count: the padding nibble is the code of 0.0 */
    float w3[3] = {1.0f, -1.0f, 0.5f};
    q = quantize(w3, 3, 1, &buf);
    CHECK(q.codes[0] == 0xF0 && q.codes[1] == 0xC7, "odd packing: %02x %02x, want f0 c7",
          q.codes[0], q.codes[1]);
    free(buf);
    /* a value exactly on a midpoint takes the lower code, one ulp above the upper */
    const float *t = nf4_table();
    for (int k = 0; k < 15; k++) {
        float mid = (float)(((double)t[k] + t[k + 1]) * 0.5);
        float v[2] = {mid, 1.0f};
        q = quantize(v, 1, 2, &buf);
        CHECK(q.codes[0] >> 4 == k, "midpoint %d: code %d", k, q.codes[0] >> 4);
        free(buf);
        v[0] = nextafterf(mid, 2.0f);
        q = quantize(v, 1, 2, &buf);
        CHECK(q.codes[0] >> 4 == k + 1, "above midpoint %d: code %d", k, q.codes[0] >> 4);
        free(buf);
    }
    /* an all-zero matrix: NaN scale, code 0, values of magnitude 0 */
    float z[130] = {0};
    float d[130];
    q = quantize(z, 2, 65, &buf);
    nf4_dequantize(&q, d);
    CHECK((q.codes[0] >> 4) == 0 && q.absmax_q[0] == 0, "zeros: code %d absmax_q %d",
          q.codes[0] >> 4, q.absmax_q[0]);
    int bad = 0;
    for (int i = 0; i < 130; i++) bad += d[i] != 0.0f;
    CHECK(!bad, "zeros: %d values not zero", bad);
    free(buf);
}

static void test_roundtrip_and_bytes(void)
{
    int64_t rows = 37, cols = 300;
    float *w = malloc((size_t)(rows * cols) * sizeof *w), *d = malloc((size_t)(rows * cols) * 4);
    for (int64_t i = 0; i < rows * cols; i++) w[i] = frand();
    void *buf;
    nf4_matrix q = quantize(w, rows, cols, &buf);
    nf4_dequantize(&q, d);
    double worst = 0;
    for (int64_t i = 0; i < rows * cols; i++) {
        int64_t b = i / NF4_BLOCK;
        float amax = 0;
        for (int64_t j = b * NF4_BLOCK; j < (b + 1) * NF4_BLOCK && j < rows * cols; j++)
            amax = fmaxf(amax, fabsf(w[j]));
        double e = fabs((double)d[i] - w[i]) / amax;
        worst = e > worst ? e : worst;
    }
    /* half the widest NF4 gap (0.304) plus the 8-bit absmax error */
    CHECK(worst < 0.16 + 0.02, "roundtrip: worst error %.4f of the block's absmax", worst);
    /* every value is its code's table value times its block's absmax (the
     * scalar rule; the whole-block path of AVX-512 CPUs must agree) */
    int exact = 1;
    for (int64_t i = 0; i < rows * cols; i++) {
        int code = i % 2 ? q.codes[i / 2] & 15 : q.codes[i / 2] >> 4;
        float want = q.quant_map[code] * nf4_block_absmax(&q, i / NF4_BLOCK);
        exact &= !memcmp(&want, &d[i], sizeof want);
    }
    CHECK(exact, "dequantize: a value is not nf4[code] * absmax of its block");
    /* ranges of any start and length equal the whole dequantization */
    float part[200];
    for (int64_t s = 0; s < 500; s += 37) {
        nf4_dequantize_range(&q, s, 131, part);
        CHECK(!memcmp(part, d + s, 131 * sizeof(float)), "range from %lld differs", (long long)s);
    }
    free(buf);
    free(w);
    free(d);
    /* memory: codes + 8-bit absmax + nested fp32 + offset + both maps */
    size_t b = nf4_bytes(4096, 4096);
    size_t want = 4096 * 4096 / 2 + 4096 * 4096 / 64 + 4096 * 4096 / 64 / 256 * 4 + 4 + 272 * 4;
    CHECK(b == want, "nf4_bytes(4096, 4096) = %zu, want %zu", b, want);
    CHECK(fabs((double)b / (4096.0 * 4096) - 0.516) < 0.001, "%.4f bytes per parameter",
          (double)b / (4096.0 * 4096));
    CHECK(nf4_bytes(3, 3) == 5 + 1 + 4 + 4 + 272 * 4, "nf4_bytes(3, 3) = %zu", nf4_bytes(3, 3));
}

/* The NF4 products against matmul on the dequantized weight, 1-3 threads. */
static void test_matmul(void)
{
    static const int shapes[][3] = {/* N, IC, OC */
                                    {1, 64, 64},   {7, 100, 37},  {33, 130, 257},
                                    {300, 200, 520}, {64, 768, 300}, {5, 1, 3}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int N = shapes[s][0], IC = shapes[s][1], OC = shapes[s][2];
        float *w = malloc((size_t)OC * IC * 4), *wd = malloc((size_t)OC * IC * 4);
        float *x = malloc((size_t)N * IC * 4), *dy = malloc((size_t)N * OC * 4);
        float *ref = malloc((size_t)N * OC * 4), *out = malloc((size_t)N * OC * 4);
        float *dref = malloc((size_t)N * IC * 4), *dx = malloc((size_t)N * IC * 4);
        float *out1 = malloc((size_t)N * OC * 4), *dx1 = malloc((size_t)N * IC * 4);
        for (int i = 0; i < OC * IC; i++) w[i] = frand() * 0.02f;
        for (int i = 0; i < N * IC; i++) x[i] = frand();
        for (int i = 0; i < N * OC; i++) dy[i] = frand();
        void *buf;
        nf4_matrix q = quantize(w, OC, IC, &buf);
        nf4_dequantize(&q, wd);
        size_t slot = nf4_matmul_scratch_floats(N, IC, OC);
        float *scratch = malloc(slot * 3 * sizeof(float));
        for (int t = 1; t <= 3; t++) {
            kernels_set_threads(t);
            for (int acc = 0; acc <= 1; acc++) {
                for (int i = 0; i < N * OC; i++) ref[i] = out[i] = 0.5f;
                matmul_forward(ref, x, wd, N, IC, OC, acc);
                nf4_matmul_forward(out, x, &q, N, acc, scratch, 3);
                CHECK(!memcmp(ref, out, (size_t)N * OC * 4),
                      "forward %dx%dx%d acc %d, %d threads: differs from matmul", N, IC, OC,
                      acc, t);
                if (t == 1 && acc == 1) memcpy(out1, out, (size_t)N * OC * 4);
                if (t > 1 && acc == 1)
                    CHECK(!memcmp(out1, out, (size_t)N * OC * 4),
                          "forward %dx%dx%d: %d threads differ from 1", N, IC, OC, t);
            }
            for (int i = 0; i < N * IC; i++) dref[i] = dx[i] = 0.25f;
            matmul_backward(dref, NULL, dy, x, wd, N, IC, OC);
            nf4_matmul_backward(dx, dy, &q, N, scratch, t == 3 ? 2 : 3);
            CHECK(!memcmp(dref, dx, (size_t)N * IC * 4),
                  "backward %dx%dx%d, %d threads: differs from matmul", N, IC, OC, t);
            if (t == 1) memcpy(dx1, dx, (size_t)N * IC * 4);
            else
                CHECK(!memcmp(dx1, dx, (size_t)N * IC * 4),
                      "backward %dx%dx%d: %d threads differ from 1", N, IC, OC, t);
        }
        kernels_set_threads(1);
        free(buf), free(w), free(wd), free(x), free(dy), free(ref), free(out), free(dref);
        free(dx), free(out1), free(dx1), free(scratch);
    }
}

/* The _ld forms: out's rows wider than OC (a module's columns of a fused
 * product), dout's rows wider than OC: the same bits as the plain forms,
 * and nothing outside the columns touched. */
static void test_matmul_ld(void)
{
    const int N = 70, IC = 130, OC = 96, LD = 300, COL = 37, T = 2;
    float *w = malloc((size_t)OC * IC * 4), *x = malloc((size_t)N * IC * 4);
    float *wide = malloc((size_t)N * LD * 4), *out = malloc((size_t)N * OC * 4);
    float *dy = malloc((size_t)N * OC * 4), *dx = malloc((size_t)N * IC * 4);
    float *dx2 = malloc((size_t)N * IC * 4);
    for (int i = 0; i < OC * IC; i++) w[i] = frand() * 0.02f;
    for (int i = 0; i < N * IC; i++) x[i] = frand();
    for (int i = 0; i < N * LD; i++) wide[i] = frand();
    void *buf;
    nf4_matrix q = quantize(w, OC, IC, &buf);
    float *scratch = malloc(nf4_matmul_scratch_floats(N, IC, OC) * T * sizeof(float));
    kernels_set_threads(T);
    nf4_matmul_forward(out, x, &q, N, 0, scratch, T);
    float *keep = malloc((size_t)N * LD * 4);
    memcpy(keep, wide, (size_t)N * LD * 4);
    nf4_matmul_forward_ld(wide + COL, LD, x, &q, N, 0, scratch, T);
    int same = 1, untouched = 1;
    for (int n = 0; n < N; n++)
        for (int j = 0; j < LD; j++) {
            float v = wide[(size_t)n * LD + j];
            if (j >= COL && j < COL + OC) same &= !memcmp(&v, &out[(size_t)n * OC + j - COL], 4);
            else untouched &= !memcmp(&v, &keep[(size_t)n * LD + j], 4);
        }
    CHECK(same, "forward_ld into columns [%d, %d) of rows of %d: differs from forward", COL,
          COL + OC, LD);
    CHECK(untouched, "forward_ld wrote outside its columns");
    for (int n = 0; n < N; n++)
        memcpy(dy + (size_t)n * OC, wide + (size_t)n * LD + COL, (size_t)OC * 4);
    for (int i = 0; i < N * IC; i++) dx[i] = dx2[i] = 0.25f;
    nf4_matmul_backward(dx, dy, &q, N, scratch, T);
    nf4_matmul_backward_ld(dx2, wide + COL, LD, &q, N, scratch, T);
    CHECK(!memcmp(dx, dx2, (size_t)N * IC * 4), "backward_ld on columns of rows of %d: "
          "differs from backward", LD);
    kernels_set_threads(1);
    free(buf), free(w), free(x), free(wide), free(out), free(dy), free(dx), free(dx2);
    free(scratch), free(keep);
}

static void test_quant_state(void)
{
    static const char *good = "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": "
                              "\"bfloat16\", \"shape\": [96, 260], \"nested_blocksize\": 256, "
                              "\"nested_dtype\": \"float32\", \"nested_offset\": 0.0625}";
    bnb_quant_state qs;
    char err[512];
    int rc = bnb_parse_quant_state(good, strlen(good), "T", &qs, err, sizeof err);
    CHECK(rc == 0 && qs.rows == 96 && qs.cols == 260 && qs.offset == 0.0625f && qs.dtype == 2,
          "good quant_state: %s", rc ? err : "wrong values");
    static const struct {
        const char *from, *to, *field;
    } bad[] = {
        {"\"nf4\"", "\"fp4\"", "quant_type"},
        {"64,", "128,", "blocksize"},
        {"256,", "4096,", "nested_blocksize"},
        {"\"bfloat16\"", "\"int8\"", "dtype"},
        {"[96, 260]", "[96]", "shape"},
        {"[96, 260]", "[96, -2]", "shape"},
        {"0.0625", "\"x\"", "nested_offset"},
        {"0.0625", "1e39", "nested_offset"},
        {"\"nested_dtype\"", "\"nested_typo\"", "nested_typo"},
        {", \"nested_blocksize\": 256", "", "nested_blocksize"},
        {"}", "", "JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[512];
        const char *at = strstr(good, bad[i].from);
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - good), good, bad[i].to,
                 at + strlen(bad[i].from));
        err[0] = 0;
        rc = bnb_parse_quant_state(text, strlen(text), "model.layers.0.mlp.up_proj.weight", &qs,
                                   err, sizeof err);
        CHECK(rc == -1 && strstr(err, bad[i].field) && strstr(err, "up_proj"),
              "bad quant_state %zu (%s): rc %d, message \"%s\"", i, bad[i].field, rc, err);
    }
}

/* A safetensors file written by hand (U8 included). */
typedef struct {
    const char *name, *dtype;
    int64_t shape[2];
    int ndim;
    const void *data;
    size_t nbytes;
} entry;

static void write_st(const char *path, const entry *e, int n)
{
    char header[8192];
    size_t len = 0, off = 0;
    len += (size_t)snprintf(header + len, sizeof header - len, "{");
    for (int i = 0; i < n; i++) {
        len += (size_t)snprintf(header + len, sizeof header - len,
                                "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld", i ? "," : "",
                                e[i].name, e[i].dtype, (long long)e[i].shape[0]);
        if (e[i].ndim == 2)
            len += (size_t)snprintf(header + len, sizeof header - len, ",%lld",
                                    (long long)e[i].shape[1]);
        len += (size_t)snprintf(header + len, sizeof header - len,
                                "],\"data_offsets\":[%zu,%zu]}", off, off + e[i].nbytes);
        off += e[i].nbytes;
    }
    len += (size_t)snprintf(header + len, sizeof header - len, "}");
    FILE *f = fopen(path, "wb");
    uint64_t hl = len;
    fwrite(&hl, 8, 1, f);
    fwrite(header, 1, len, f);
    for (int i = 0; i < n; i++) fwrite(e[i].data, 1, e[i].nbytes, f);
    fclose(f);
}

static void test_bnb_file(void)
{
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/nf4_%d.safetensors", SHARDNODE_TEST_TMP, (int)getpid());
    const int64_t R = 5, C = 70; /* 350 values: 6 blocks, the last short */
    float w[350], d[350], back[350];
    for (int i = 0; i < 350; i++) w[i] = frand();
    void *buf;
    nf4_matrix q = quantize(w, R, C, &buf);
    nf4_dequantize(&q, d);
    char qs[256];
    snprintf(qs, sizeof qs, "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": "
             "\"float32\", \"shape\": [5, 70], \"nested_blocksize\": 256, \"nested_dtype\": "
             "\"float32\", \"nested_offset\": %.9g}", (double)q.offset);
    float norm[3] = {1, 2, 3};
    entry e[] = {
        {"w", "U8", {175, 1}, 2, q.codes, 175},
        {"w.absmax", "U8", {6}, 1, q.absmax_q, 6},
        {"w.quant_map", "F32", {16}, 1, q.quant_map, 64},
        {"w.nested_absmax", "F32", {1}, 1, q.nested_absmax, 4},
        {"w.nested_quant_map", "F32", {256}, 1, q.nested_map, 1024},
        {"w.quant_state.bitsandbytes__nf4", "U8", {(int64_t)strlen(qs)}, 1, qs, strlen(qs)},
        {"norm", "F32", {3}, 1, norm, 12},
    };
    int n = (int)(sizeof e / sizeof *e);
    write_st(path, e, n);
    bnb_file *f;
    int64_t shape[2] = {R, C}, nshape[1] = {3};
    int rc = bnb_open(&f, path, err, sizeof err);
    CHECK(rc == 0, "bnb_open: %s", err);
    if (rc == 0) {
        CHECK(bnb_is_quantized_file(f) && bnb_is_quantized(f, "w") && !bnb_is_quantized(f, "norm"),
              "quantized flags");
        rc = bnb_read_f32(f, "w", 2, shape, back, err, sizeof err);
        CHECK(rc == 0 && !memcmp(back, d, sizeof d), "bnb_read_f32(w): %s",
              rc ? err : "values differ from nf4_dequantize");
        rc = bnb_read_f32(f, "norm", 1, nshape, back, err, sizeof err);
        CHECK(rc == 0 && back[2] == 3.0f, "bnb_read_f32(norm): %s", err);
        int64_t wrong[2] = {7, 50};
        rc = bnb_read_f32(f, "w", 2, wrong, back, err, sizeof err);
        CHECK(rc == -1 && strstr(err, "quant_state.shape"), "wrong shape: %s", err);
        bnb_close(f);
    }
    /* refusals, each naming the part */
    float badmap[16];
    memcpy(badmap, q.quant_map, sizeof badmap);
    badmap[3] = 0.0f;
    static const char *const want[] = {"w.quant_map", "w.absmax", "w.nested_absmax",
                                       "w.absmax", "bitsandbytes__nf4"};
    for (int k = 0; k < 5; k++) {
        entry b[7];
        memcpy(b, e, sizeof b);
        if (k == 0) b[2].data = badmap;
        if (k == 1) b[1].dtype = "I32", b[1].shape[0] = 6, b[1].nbytes = 24,
                    b[1].data = badmap; /* 24 bytes of something */
        if (k == 2) b[3].name = "w.nested_absmax_renamed";
        if (k == 3) b[1].shape[0] = 5, b[1].nbytes = 5;
        if (k == 4) b[5].name = "w.quant_state.bitsandbytes__fp4";
        write_st(path, b, n);
        rc = bnb_open(&f, path, err, sizeof err);
        if (rc == 0) {
            rc = bnb_read_f32(f, "w", 2, shape, back, err, sizeof err);
            bnb_close(f);
        }
        CHECK(rc == -1 && strstr(err, want[k]), "refusal %d: rc %d, \"%s\"", k, rc, err);
    }
    /* a container that does not tile its data */
    entry h[2] = {e[6], e[6]};
    h[1].name = "norm2";
    write_st(path, h, 2);
    FILE *fp = fopen(path, "ab");
    fputc(0, fp);
    fclose(fp);
    rc = bnb_open(&f, path, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "belong to no tensor"), "trailing byte: %s", err);
    if (rc == 0) bnb_close(f);
    unlink(path);
    free(buf);
}

static int write_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) {
        fprintf(stderr, "%s: cannot write\n", path);
        if (f) fclose(f);
        return -1;
    }
    return fclose(f) ? -1 : 0;
}

static int cli(int argc, char **argv)
{
    char err[1024];
    if (argc == 6 && !strcmp(argv[1], "quantize")) {
        int64_t rows = atoll(argv[3]), cols = atoll(argv[4]), n = rows * cols;
        float *w = malloc((size_t)n * 4 + 4), *d = malloc((size_t)n * 4 + 4);
        float *absmax = malloc((size_t)nf4_blocks(rows, cols) * 4 + 4);
        FILE *f = fopen(argv[2], "rb");
        if (!w || !d || !absmax || !f || fread(w, 4, (size_t)n, f) != (size_t)n) {
            fprintf(stderr, "%s: cannot read %lld floats\n", argv[2], (long long)n);
            return 1;
        }
        fclose(f);
        void *buf = malloc(nf4_bytes(rows, cols));
        nf4_matrix q;
        nf4_init(&q, rows, cols, buf);
        nf4_quantize(&q, w, absmax);
        nf4_dequantize(&q, d);
        int64_t nb = nf4_blocks(rows, cols);
        int rc = write_file(argv[5], "codes.u8", q.codes, (size_t)(n + 1) / 2) ||
                 write_file(argv[5], "absmax_q.u8", q.absmax_q, (size_t)nb) ||
                 write_file(argv[5], "nested.f32", q.nested_absmax,
                            (size_t)nf4_nested_blocks(rows, cols) * 4) ||
                 write_file(argv[5], "offset.f32", &q.offset, 4) ||
                 write_file(argv[5], "absmax.f32", absmax, (size_t)nb * 4) ||
                 write_file(argv[5], "deq.f32", d, (size_t)n * 4) ||
                 write_file(argv[5], "map8.f32", q.nested_map, 1024);
        free(w), free(d), free(absmax), free(buf);
        return rc ? 1 : 0;
    }
    if ((argc == 5 && !strcmp(argv[1], "hfread")) || (argc == 3 && !strcmp(argv[1], "hfcheck"))) {
        hf_model *m;
        if (hf_open(&m, argv[2], err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        int rc = 0;
        if (argc == 3) {
            rc = hf_check(m, err, sizeof err);
        } else {
            int ndim;
            int64_t shape[2];
            if (gguf_llama_shape(hf_config(m), argv[3], &ndim, shape)) {
                fprintf(stderr, "%s: not a tensor of the config\n", argv[3]);
                hf_close(m);
                return 1;
            }
            size_t n = (size_t)shape[0] * (ndim == 2 ? (size_t)shape[1] : 1);
            float *dst = malloc(n * 4);
            rc = hf_read_f32(m, argv[3], dst, n, err, sizeof err);
            if (rc == 0) {
                FILE *f = fopen(argv[4], "wb");
                rc = !f || fwrite(dst, 4, n, f) != n;
                if (f) fclose(f);
                snprintf(err, sizeof err, "%s: cannot write", argv[4]);
            }
            free(dst);
        }
        if (rc) fprintf(stderr, "%s\n", err);
        hf_close(m);
        return rc ? 1 : 0;
    }
    fprintf(stderr, "usage: test_nf4 [quantize IN.f32 ROWS COLS OUTDIR | hfread DIR NAME "
            "OUT.f32 | hfcheck DIR]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc > 1) return cli(argc, argv);
    test_packing();
    test_roundtrip_and_bytes();
    test_matmul();
    test_matmul_ld();
    test_quant_state();
    test_bnb_file();
    printf("test_nf4 (%s kernel): %s\n", kernels_gemm_name(), failures ? "FAILED" : "ok");
    return failures != 0;
}

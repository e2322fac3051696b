/* test_tokenizer.c — byte-level BPE: encoding, decoding, tokenizer.json,
 * training.
 *
 * What a user relies on: any byte string (invalid UTF-8, NULs, emoji)
 * encodes and decodes back exactly; merges apply lowest rank first as HF
 * applies them, so ids match other implementations; GPT-2 and Llama-3
 * style files load; what we save loads back identically; training is
 * deterministic; special tokens are ids only when asked for; files we
 * cannot honour are refused with a message naming the file and why. */
#include "model.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static char tmp_dir[400];   /* a folder of this process's own, removed at the end */

static const char *tmp_path(const char *name)
{
    static char paths[8][700];
    static int k;
    char *p = paths[k++ % 8];
    snprintf(p, 700, "%s/%s", tmp_dir, name);
    return p;
}

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "wb");
    if (!fp || fputs(text, fp) == EOF || fclose(fp) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
}

static char *read_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (!fp || fseek(fp, 0, SEEK_END) || (n = ftell(fp)) < 0 || fseek(fp, 0, SEEK_SET) ||
        !(buf = malloc((size_t)n + 1)) || fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    fclose(fp);
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

static uint64_t rng_state = 0x1234567887654321ull;

static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

/* ---- hand-built tokenizer.json ------------------------------------------ */

/* GPT-2's byte alphabet, written out here independently of the library:
 * printable Latin-1 stands for itself, the other 68 bytes get U+0100.. in
 * byte order. Returns the JSON text of byte b's token (escaped). */
static const char *byte_token(int b)
{
    static char out[8];
    static int code[256];
    static int ready;
    if (!ready) {
        int n = 0;
        for (int c = 0; c < 256; c++) {
            bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
            code[c] = printable ? c : 256 + n++;
        }
        ready = 1;
    }
    int cp = code[b];
    if (cp == '"' || cp == '\\') {
        out[0] = '\\';
        out[1] = (char)cp;
        out[2] = 0;
    } else if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
    return out;
}

#define GPT2_PRE "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true}"
#define LLAMA3_REGEX                                                                      \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| " \
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"
#define LLAMA3_PRE                                                                    \
    "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":" \
    "\"" LLAMA3_REGEX "\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":"          \
    "\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]}"

typedef struct {
    const char *model_type;   /* default "BPE" */
    const char *pre;          /* default GPT-2's ByteLevel */
    const char *normalizer;   /* default null */
    const char *decoder;      /* default ByteLevel */
    const char *extra;        /* more vocabulary: "\"ab\":256,\"bc\":257" */
    const char *merges;       /* "\"a b\",\"ab c\"" */
    const char *added;        /* added_tokens entries */
    const char *model_keys;   /* more keys of model: "\"ignore_merges\":true," */
    int skip_byte;            /* leave this byte out of the vocabulary (-1: none) */
} spec;

/* A tokenizer.json: the 256 byte tokens with ids 0..255 in byte order, then
 * s->extra. */
static char *build_json(const spec *s)
{
    size_t cap = 16384 + strlen(s->extra ? s->extra : "") + strlen(s->merges ? s->merges : "") +
                 strlen(s->added ? s->added : "") + strlen(s->pre ? s->pre : "");
    char *out = malloc(cap);
    size_t n = 0;
    n += (size_t)snprintf(out + n, cap - n,
                          "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,"
                          "\"added_tokens\":[%s],\"normalizer\":%s,\"pre_tokenizer\":%s,"
                          "\"post_processor\":null,\"decoder\":%s,\"model\":{\"type\":\"%s\","
                          "%s\"vocab\":{",
                          s->added ? s->added : "", s->normalizer ? s->normalizer : "null",
                          s->pre ? s->pre : GPT2_PRE,
                          s->decoder ? s->decoder : "{\"type\":\"ByteLevel\"}",
                          s->model_type ? s->model_type : "BPE",
                          s->model_keys ? s->model_keys : "");
    bool first = true;
    for (int b = 0; b < 256; b++) {
        if (b == s->skip_byte) continue;
        n += (size_t)snprintf(out + n, cap - n, "%s\"%s\":%d", first ? "" : ",", byte_token(b),
                              b);
        first = false;
    }
    n += (size_t)snprintf(out + n, cap - n, "%s%s},\"merges\":[%s]}}\n",
                          s->extra && *s->extra ? "," : "", s->extra ? s->extra : "",
                          s->merges ? s->merges : "");
    return out;
}

static tokenizer *load_spec(const spec *s, const char *name)
{
    char *json = build_json(s), err[512] = "";
    const char *path = tmp_path(name);
    tokenizer *t = NULL;
    write_file(path, json);
    free(json);
    int rc = tokenizer_load(&t, path, err, sizeof err);
    CHECK(rc == 0, "loading %s: %s", name, err);
    return rc == 0 ? t : NULL;
}

/* encode(text) must be exactly want[0..nwant). */
static void expect_ids(int line, const tokenizer *t, const char *text, bool special,
                       const int32_t *want, size_t nwant)
{
    int32_t *ids;
    size_t n;
    char err[512];
    if (tokenizer_encode(t, text, strlen(text), special, &ids, &n, err, sizeof err)) {
        failures++;
        fprintf(stderr, "%s:%d: FAIL: encode \"%s\": %s\n", __FILE__, line, text, err);
        return;
    }
    bool same = n == nwant;
    for (size_t i = 0; same && i < n; i++) same = ids[i] == want[i];
    if (!same) {
        failures++;
        fprintf(stderr, "%s:%d: FAIL: encode \"%s\" gave", __FILE__, line, text);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, ", expected");
        for (size_t i = 0; i < nwant; i++) fprintf(stderr, " %d", want[i]);
        fputc('\n', stderr);
    }
    free(ids);
}
#define EXPECT_IDS(t, text, special, ...)                                               \
    do {                                                                                \
        const int32_t want_[] = {__VA_ARGS__};                                          \
        expect_ids(__LINE__, t, text, special, want_, sizeof want_ / sizeof *want_);    \
    } while (0)

/* decode(encode(data)) == data. */
static bool round_trips(const tokenizer *t, const char *data, size_t len, bool special)
{
    int32_t *ids;
    size_t n, outlen;
    char *out, err[512];
    if (tokenizer_encode(t, data, len, special, &ids, &n, err, sizeof err)) {
        fprintf(stderr, "encode: %s\n", err);
        return false;
    }
    int rc = tokenizer_decode(t, ids, n, &out, &outlen, err, sizeof err);
    free(ids);
    if (rc) {
        fprintf(stderr, "decode: %s\n", err);
        return false;
    }
    bool same = outlen == len && memcmp(out, data, len) == 0 && out[outlen] == 0;
    free(out);
    return same;
}

/* ---- a trained tokenizer -------------------------------------------------- */

static const char *const corpus[] = {
    "In the beginning God created the heaven and the earth. And the earth was without "
    "form, and void; and darkness was upon the face of the deep. And the Spirit of God "
    "moved upon the face of the waters. And God said, Let there be light: and there was "
    "light. It's 1611, they'll say; we've 12345 verses and 3.14 loaves.\n\n",
    "Der Anfang: Gott schuf Himmel und Erde. Über alles — 「はじめに神は天と地とを創造された」 "
    "😀😀 👍🏽 naïve café résumé <|endoftext|> The end.\r\n\t  indented\n",
};

static tokenizer *train_small(int vocab_size, const char *const *specials, int nspecials)
{
    const char *texts[8];
    size_t lens[8];
    char err[512] = "";
    tokenizer *t = NULL;
    for (int i = 0; i < 8; i++) {
        texts[i] = corpus[i % 2];
        lens[i] = strlen(texts[i]);
    }
    int rc = tokenizer_train(&t, texts, lens, 8, vocab_size, specials, nspecials, err,
                             sizeof err);
    CHECK(rc == 0, "train: %s", err);
    return t;
}

/* ---- the tests ------------------------------------------------------------- */

static void test_byte_alphabet(void)
{
    spec s = {.skip_byte = -1};
    tokenizer *t = load_spec(&s, "bytes.json");
    if (!t) return;
    CHECK(tokenizer_vocab_size(t) == 256, "vocab %d", tokenizer_vocab_size(t));
    /* With no merges every byte is its own token, whose id the file gives. */
    for (int b = 1; b < 256; b++) {
        char text[2] = {(char)b, 0};
        EXPECT_IDS(t, text, false, b);
    }
    int32_t *ids;
    size_t n;
    char err[512];
    CHECK(tokenizer_encode(t, "\0", 1, false, &ids, &n, err, sizeof err) == 0 && n == 1 &&
          ids[0] == 0, "NUL byte");
    free(ids);
    tokenizer_free(t);
}

/* HF applies the pair of lowest rank first, leftmost among equals, one
 * merge at a time; greedy left-to-right, or "all occurrences of the best
 * pair at once" (GPT-2's Python), would give other ids. */
static void test_lowest_rank_first(void)
{
    spec s = {.skip_byte = -1,
              .extra = "\"aba\":256,\"bc\":257,\"ab\":258,\"abc\":259,\"aa\":260",
              .merges = "\"ab a\",\"b c\",\"a b\",\"a bc\",\"a a\""};
    tokenizer *t = load_spec(&s, "ranks.json");
    if (!t) return;
    /* (b,c) rank 1 before (a,b) rank 2, then (a,bc): greedy would stop at [ab, c] */
    EXPECT_IDS(t, "abc", false, 259);
    /* (a,b) at 0 first; then (ab,a) of rank 0 beats the second (a,b) */
    EXPECT_IDS(t, "abab", false, 256, 'b');
    /* leftmost first among equal ranks */
    EXPECT_IDS(t, "aaa", false, 260, 'a');
    EXPECT_IDS(t, "aaaa", false, 260, 260);
    EXPECT_IDS(t, "cab", false, 'c', 258);
    /* chunks never merge across the split regex: " ab" and "c," */
    EXPECT_IDS(t, "ab abc,", false, 258, ' ', 259, ',');
    tokenizer_free(t);
}

/* Llama 3: Split with its own regex (digits in threes), merges as
 * two-element lists, ignore_merges. */
static void test_llama3_style(void)
{
    const char *extra = "\"12\":256,\"123\":257,\"1234\":258,\"45\":259,\"xyz\":260";
    const char *merges = "[\"1\",\"2\"],[\"12\",\"3\"],[\"123\",\"4\"],[\"4\",\"5\"]";
    spec gpt2 = {.skip_byte = -1, .extra = extra, .merges = merges};
    spec llama = {.skip_byte = -1, .extra = extra, .merges = merges, .pre = LLAMA3_PRE,
                  .model_keys = "\"ignore_merges\":true,"};
    tokenizer *g = load_spec(&gpt2, "gpt2_style.json");
    tokenizer *l = load_spec(&llama, "llama3_style.json");
    if (!g || !l) goto done;
    EXPECT_IDS(g, "12345", false, 258, '5');  /* one chunk */
    EXPECT_IDS(l, "12345", false, 257, 259);  /* "123" "45" */
    /* ignore_merges: "xyz" has no merges but is in the vocabulary */
    EXPECT_IDS(g, "xyz", false, 'x', 'y', 'z');
    EXPECT_IDS(l, "xyz", false, 260);
    /* (?i:'s): "'S" is one chunk for Llama 3 and not for GPT-2 */
    EXPECT_IDS(l, "'Sxyz", false, '\'', 'S', 260);
    EXPECT_IDS(g, "'Sxyz", false, '\'', 'S', 'x', 'y', 'z');
    /* saved and loaded back, the Split and its regex survive */
    char err[512] = "";
    const char *p1 = tmp_path("llama3_saved.json"), *p2 = tmp_path("llama3_saved2.json");
    tokenizer *back = NULL;
    int rc = tokenizer_save(l, p1, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (rc == 0) {
        rc = tokenizer_load(&back, p1, err, sizeof err);
        CHECK(rc == 0, "%s", err);
    }
    if (back) {
        EXPECT_IDS(back, "12345", false, 257, 259);
        EXPECT_IDS(back, "xyz", false, 260);
        CHECK(tokenizer_save(back, p2, err, sizeof err) == 0, "%s", err);
        size_t n1, n2;
        char *a = read_file(p1, &n1), *b = read_file(p2, &n2);
        CHECK(n1 == n2 && memcmp(a, b, n1) == 0, "saving a loaded Llama-3 file changed it");
        CHECK(strstr(a, "\"Split\"") && strstr(a, "\\\\p{N}{1,3}") &&
              strstr(a, "\"ignore_merges\": true"), "Split regex or ignore_merges lost");
        free(a);
        free(b);
        tokenizer_free(back);
    }
done:
    tokenizer_free(g);
    tokenizer_free(l);
}

/* GPT-2's own file lists <|endoftext|> in the vocabulary and in
 * added_tokens, and writes "" for the unused affixes. */
static void test_gpt2_file_shape(void)
{
    spec s = {.skip_byte = -1,
              .extra = "\"<|endoftext|>\":256",
              .added = "{\"id\":256,\"content\":\"<|endoftext|>\",\"single_word\":false,"
                       "\"lstrip\":false,\"rstrip\":false,\"normalized\":true,"
                       "\"special\":true}",
              .model_keys = "\"dropout\":null,\"unk_token\":null,"
                            "\"continuing_subword_prefix\":\"\",\"end_of_word_suffix\":\"\","
                            "\"fuse_unk\":false,"};
    tokenizer *t = load_spec(&s, "gpt2_file.json");
    if (!t) return;
    CHECK(tokenizer_eos_id(t) == 256 && tokenizer_special_id(t, "<|endoftext|>") == 256,
          "eos %d", tokenizer_eos_id(t));
    CHECK(tokenizer_special_id(t, "<|nothing|>") == -1, "unknown special");
    EXPECT_IDS(t, "a<|endoftext|>", true, 'a', 256);
    char err[512];
    const char *p = tmp_path("gpt2_file_saved.json");
    tokenizer *back = NULL;
    CHECK(tokenizer_save(t, p, err, sizeof err) == 0 && tokenizer_load(&back, p, err,
                                                                         sizeof err) == 0,
          "%s", err);
    if (back) {
        EXPECT_IDS(back, "a<|endoftext|>", true, 'a', 256);
        CHECK(tokenizer_vocab_size(back) == 257, "vocab %d", tokenizer_vocab_size(back));
        tokenizer_free(back);
    }
    tokenizer_free(t);
}

/* DeepSeek-style: a vocabulary string outside the byte alphabet stands for
 * its own UTF-8; it is reached as an added token, never by BPE, not even
 * with ignore_merges. */
static void test_raw_vocab_string(void)
{
    spec s = {.skip_byte = -1,
              .extra = "\"<｜bos｜>\":256",
              .added = "{\"id\":256,\"content\":\"<｜bos｜>\",\"special\":true}",
              .model_keys = "\"ignore_merges\":true,"};
    tokenizer *t = load_spec(&s, "raw_string.json");
    if (!t) return;
    const char *text = "<｜bos｜>";
    int32_t *ids;
    size_t n;
    char err[512];
    CHECK(tokenizer_encode(t, text, strlen(text), false, &ids, &n, err, sizeof err) == 0 &&
          n == strlen(text) && ids[0] == '<', "raw string as plain text: %zu ids", n);
    free(ids);
    EXPECT_IDS(t, text, true, 256);
    CHECK(round_trips(t, text, strlen(text), true), "raw string round trip");
    const char *p1 = tmp_path("raw_saved.json"), *p2 = tmp_path("raw_saved2.json");
    tokenizer *back = NULL;
    CHECK(tokenizer_save(t, p1, err, sizeof err) == 0 &&
          tokenizer_load(&back, p1, err, sizeof err) == 0 &&
          tokenizer_save(back, p2, err, sizeof err) == 0, "%s", err);
    size_t n1 = 0, n2 = 0;
    char *a = read_file(p1, &n1), *b = read_file(p2, &n2);
    CHECK(n1 == n2 && memcmp(a, b, n1) == 0 && strstr(a, "\"<｜bos｜>\": 256"),
          "raw string not kept by save/load");
    free(a);
    free(b);
    tokenizer_free(back);
    tokenizer_free(t);
}

static void test_specials(void)
{
    const char *specials[] = {"<|endoftext|>", "<|end|>", "<|end|>!"};
    tokenizer *t = train_small(400, specials, 3);
    if (!t) return;
    CHECK(tokenizer_vocab_size(t) == 400, "vocab %d", tokenizer_vocab_size(t));
    CHECK(tokenizer_special_id(t, "<|endoftext|>") == 397 &&
          tokenizer_special_id(t, "<|end|>") == 398 && tokenizer_special_id(t, "<|end|>!") == 399,
          "specials take the last ids");
    CHECK(tokenizer_eos_id(t) == 397, "eos %d", tokenizer_eos_id(t));
    /* leftmost, then longest */
    EXPECT_IDS(t, "<|end|>!<|end|><|endoftext|>", true, 399, 398, 397);
    int32_t *ids;
    size_t n;
    char err[512];
    const char *text = "x<|endoftext|>y";
    CHECK(tokenizer_encode(t, text, strlen(text), false, &ids, &n, err, sizeof err) == 0,
          "%s", err);
    for (size_t i = 0; i < n; i++) CHECK(ids[i] < 397, "special id %d without allow_special",
                                         ids[i]);
    free(ids);
    CHECK(round_trips(t, text, strlen(text), true) && round_trips(t, text, strlen(text), false),
          "specials round trip");
    /* the corpus holds "<|endoftext|>": training cut it out, so no merge
     * learned "<|" + "endoftext" pieces beyond what the text itself has */
    const int32_t eot = 397;
    char *out;
    size_t len;
    CHECK(tokenizer_decode(t, &eot, 1, &out, &len, err, sizeof err) == 0 && len == 13 &&
          memcmp(out, "<|endoftext|>", 13) == 0, "decode of the special");
    free(out);
    tokenizer_free(t);
}

/* Random byte strings: invalid UTF-8 of every kind, NULs, lone
 * continuation bytes, emoji, whitespace runs, specials. */
static size_t random_bytes(char *buf, size_t max)
{
    static const char *const pieces[] = {
        "the", " the", " God", "'s", "'ll", " ", "  ", "\n", "\r\n", "\t", "12345", "3.14",
        "😀", "👍🏽", "\xF0\x9F\x87\xAB\xF0\x9F\x87\xB7", "日本語", "naïve", "\xC2\xA0",
        "\xE3\x80\x80", "\xE1\xA0\x8E", "<|endoftext|>", "<|end", "\xCC\x81",
        /* invalid: lone continuation, truncated, overlong, surrogate, > U+10FFFF */
        "\x80", "\xBF", "\xC3", "\xE2\x82", "\xF0\x9F\x98", "\xC0\xAF", "\xED\xA0\x80",
        "\xF4\x90\x80\x80", "\xFF", "\xFE",
    };
    size_t n = 0, npieces = sizeof pieces / sizeof *pieces;
    while (n < max) {
        uint32_t r = rnd(4);
        if (r == 0) {
            buf[n++] = (char)rnd(256); /* any byte, NUL included */
        } else {
            const char *p = pieces[rnd((uint32_t)npieces)];
            size_t l = strlen(p);
            if (n + l > max) break;
            memcpy(buf + n, p, l);
            n += l;
        }
        if (rnd(40) == 0) break;
    }
    return n;
}

static void test_round_trip_random(void)
{
    const char *specials[] = {"<|endoftext|>"};
    tokenizer *trained = train_small(500, specials, 1);
    spec ls = {.skip_byte = -1, .pre = LLAMA3_PRE, .extra = "\"12\":256",
               .merges = "\"1 2\""};
    tokenizer *llama = load_spec(&ls, "llama3_rt.json");
    spec raw = {.skip_byte = -1, .pre = "{\"type\":\"ByteLevel\",\"use_regex\":false,"
                                        "\"add_prefix_space\":false}"};
    tokenizer *noregex = load_spec(&raw, "noregex.json");
    tokenizer *all[] = {trained, llama, noregex};
    char buf[600];
    for (int k = 0; k < 3; k++) {
        if (!all[k]) continue;
        int bad = 0;
        for (int i = 0; i < 1500 && bad < 3; i++) {
            size_t n = random_bytes(buf, sizeof buf);
            bool special = rnd(2);
            if (!round_trips(all[k], buf, n, special)) {
                bad++;
                failures++;
                fprintf(stderr, "FAIL: tokenizer %d: %zu random bytes do not round-trip:", k, n);
                for (size_t j = 0; j < n && j < 64; j++)
                    fprintf(stderr, " %02x", (unsigned char)buf[j]);
                fputc('\n', stderr);
            }
        }
        CHECK(round_trips(all[k], "", 0, false), "empty text");
    }
    /* Long runs: the regex backtracks over them (JIT stack), BPE merges them. */
    size_t big = 200000;
    char *long_run = malloc(big);
    const char fills[] = {' ', 'a', '\n', '\x80', '7'};
    for (size_t f = 0; f < sizeof fills && trained; f++) {
        memset(long_run, fills[f], big);
        long_run[big - 1] = 'x';
        CHECK(round_trips(trained, long_run, big, false), "a run of 200000 x 0x%02x",
              (unsigned char)fills[f]);
    }
    free(long_run);
    for (int k = 0; k < 3; k++) tokenizer_free(all[k]);
}

static void test_save_load_same(void)
{
    const char *specials[] = {"<|endoftext|>", "<|pad|>"};
    tokenizer *t = train_small(450, specials, 2), *back = NULL;
    if (!t) return;
    char err[512] = "";
    const char *p1 = tmp_path("trained.json"), *p2 = tmp_path("trained_again.json");
    int rc = tokenizer_save(t, p1, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (rc == 0) {
        rc = tokenizer_load(&back, p1, err, sizeof err);
        CHECK(rc == 0, "%s", err);
    }
    if (!back) goto done;
    CHECK(tokenizer_vocab_size(back) == 450, "vocab %d", tokenizer_vocab_size(back));
    CHECK(tokenizer_special_id(back, "<|pad|>") == 449, "pad %d",
          tokenizer_special_id(back, "<|pad|>"));
    /* same ids on the corpus and random bytes */
    char buf[600];
    for (int i = 0; i < 200; i++) {
        size_t n = i < 2 ? strlen(corpus[i]) : random_bytes(buf, sizeof buf);
        const char *text = i < 2 ? corpus[i] : buf;
        int32_t *a, *b;
        size_t na, nb;
        CHECK(tokenizer_encode(t, text, n, true, &a, &na, err, sizeof err) == 0 &&
              tokenizer_encode(back, text, n, true, &b, &nb, err, sizeof err) == 0, "%s", err);
        CHECK(na == nb && memcmp(a, b, na * sizeof *a) == 0, "ids differ after save/load");
        free(a);
        free(b);
    }
    /* and the file it saves again is the same file */
    CHECK(tokenizer_save(back, p2, err, sizeof err) == 0, "%s", err);
    size_t n1, n2;
    char *f1 = read_file(p1, &n1), *f2 = read_file(p2, &n2);
    CHECK(n1 == n2 && memcmp(f1, f2, n1) == 0, "save(load(save(t))) differs from save(t)");
    CHECK(strstr(f1, "\"type\": \"BPE\"") && strstr(f1, "\"use_regex\": true") &&
          strstr(f1, "\"<|pad|>\"") && strstr(f1, "\"merges\": [\n      \""),
          "the file is not shaped as HF writes it");
    free(f1);
    free(f2);
done:
    tokenizer_free(back);
    tokenizer_free(t);
}

static void test_training_deterministic(void)
{
    const char *specials[] = {"<|endoftext|>"};
    tokenizer *a = train_small(600, specials, 1), *b = train_small(600, specials, 1);
    char err[512] = "";
    if (a && b) {
        const char *pa = tmp_path("det_a.json"), *pb = tmp_path("det_b.json");
        CHECK(tokenizer_save(a, pa, err, sizeof err) == 0 &&
              tokenizer_save(b, pb, err, sizeof err) == 0, "%s", err);
        size_t na, nb;
        char *fa = read_file(pa, &na), *fb = read_file(pb, &nb);
        CHECK(na == nb && memcmp(fa, fb, na) == 0, "two trainings gave two files");
        free(fa);
        free(fb);
        /* BPE learned the obvious: " the" is one token */
        int32_t *ids;
        size_t n;
        CHECK(tokenizer_encode(a, " the", 4, false, &ids, &n, err, sizeof err) == 0 && n == 1,
              "\" the\" is %zu tokens", n);
        free(ids);
    }
    tokenizer_free(a);
    tokenizer_free(b);

    /* a corpus too small for the vocabulary gives what it has */
    const char *tiny[] = {"abab abab"};
    size_t tlen[] = {9};
    tokenizer *t = NULL;
    CHECK(tokenizer_train(&t, tiny, tlen, 1, 1000, specials, 1, err, sizeof err) == 0, "%s",
          err);
    if (t) CHECK(tokenizer_vocab_size(t) < 1000 && tokenizer_eos_id(t) ==
                 tokenizer_vocab_size(t) - 1, "tiny corpus vocab %d", tokenizer_vocab_size(t));
    tokenizer_free(t);
    t = NULL;
    CHECK(tokenizer_train(&t, tiny, tlen, 1, 200, specials, 1, err, sizeof err) == -1 &&
          strstr(err, "200"), "vocab below 257 accepted: %s", err);
    const char *twice[] = {"<|x|>", "<|x|>"};
    CHECK(tokenizer_train(&t, tiny, tlen, 1, 300, twice, 2, err, sizeof err) == -1 &&
          strstr(err, "<|x|>"), "a special given twice accepted: %s", err);
}

/* A vocabulary without some bytes (SmolLM2's lacks 21) loads; encoding
 * drops those bytes as HF tokenizers does, and their neighbours merge. A
 * tokenizer_config.json beside the file names the end-of-text token. */
static void test_missing_bytes_and_config_eos(void)
{
    spec s = {.skip_byte = 'b', .extra = "\"ac\":256", .merges = "\"a c\"",
              .added = "{\"id\":257,\"content\":\"<|endoftext|>\",\"special\":true},"
                       "{\"id\":258,\"content\":\"<|im_end|>\",\"special\":true}"};
    tokenizer *t = load_spec(&s, "nobyte.json");
    if (!t) return;
    unsigned char missing[256];
    CHECK(tokenizer_missing_bytes(t, missing) == 1 && missing[0] == 'b', "missing bytes %d",
          tokenizer_missing_bytes(t, NULL));
    EXPECT_IDS(t, "abc", false, 256);         /* b dropped: a and c merge */
    EXPECT_IDS(t, "xbbx", false, 'x', 'x');
    int32_t *ids;
    size_t n;
    char err[512] = "";
    CHECK(tokenizer_encode(t, "b", 1, false, &ids, &n, err, sizeof err) == 0 && n == 0,
          "a text of missing bytes alone: %s", err);
    free(ids);
    CHECK(tokenizer_eos_id(t) == 257, "eos without tokenizer_config.json %d",
          tokenizer_eos_id(t));
    tokenizer_free(t);

    const char *cfg = tmp_path("tokenizer_config.json");
    write_file(cfg, "{\"eos_token\": \"<|im_end|>\", \"bos_token\": null}");
    t = load_spec(&s, "nobyte.json");
    CHECK(t && tokenizer_eos_id(t) == 258, "eos from tokenizer_config.json %d",
          t ? tokenizer_eos_id(t) : -1);
    tokenizer_free(t);
    write_file(cfg, "{\"eos_token\": {\"content\": \"<|endoftext|>\", \"special\": true}}");
    t = load_spec(&s, "nobyte.json");
    CHECK(t && tokenizer_eos_id(t) == 257, "eos as an AddedToken object %d",
          t ? tokenizer_eos_id(t) : -1);
    tokenizer_free(t);
    static const char *const bad[][2] = {{"{\"eos_token\": \"</s>\"}", "\"</s>\" is not one"},
                                         {"{\"eos_token\": 7}", "eos_token must be"},
                                         {"{\"eos_token\": ", "invalid JSON"},
                                         {"[]", "expected a JSON object"}};
    for (int i = 0; i < 4; i++) {
        char *json = build_json(&s);
        const char *path = tmp_path("nobyte.json");
        write_file(path, json);
        free(json);
        write_file(cfg, bad[i][0]);
        t = NULL;
        int rc = tokenizer_load(&t, path, err, sizeof err);
        CHECK(rc == -1 && !t && strstr(err, cfg) && strstr(err, bad[i][1]),
              "tokenizer_config.json %s: rc %d: %s", bad[i][0], rc, err);
        tokenizer_free(t);
    }
    unlink(cfg);
}

/* Loading `s` must fail with a message naming the file and `needle`. */
static void expect_refused(int line, const spec *s, const char *raw, const char *needle)
{
    const char *path = tmp_path("refused.json");
    char *json = raw ? NULL : build_json(s), err[512] = "";
    tokenizer *t = NULL;
    write_file(path, raw ? raw : json);
    free(json);
    int rc = tokenizer_load(&t, path, err, sizeof err);
    if (rc == 0 || t || !strstr(err, path) || !strstr(err, needle)) {
        failures++;
        fprintf(stderr, "%s:%d: FAIL: expected an error naming %s and '%s'; rc=%d: %s\n",
                __FILE__, line, path, needle, rc, err);
    }
    tokenizer_free(t);
}
#define EXPECT_REFUSED(s, raw, needle) expect_refused(__LINE__, s, raw, needle)

static void test_refusals(void)
{
    spec s = {.skip_byte = -1};
    s.model_type = "WordPiece";
    EXPECT_REFUSED(&s, NULL, "model type WordPiece is not supported (byte-level BPE only)");
    s.model_type = "Unigram";
    EXPECT_REFUSED(&s, NULL, "Unigram");
    s.model_type = NULL;
    s.pre = "{\"type\":\"Metaspace\",\"replacement\":\"▁\"}";
    EXPECT_REFUSED(&s, NULL, "pre_tokenizer Metaspace is not supported");
    s.pre = "null";
    EXPECT_REFUSED(&s, NULL, "without a ByteLevel pre_tokenizer");
    s.pre = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
            "{\"Regex\":\"\\\\s+\"},\"behavior\":\"Removed\"},{\"type\":\"ByteLevel\","
            "\"use_regex\":false,\"add_prefix_space\":false}]}";
    EXPECT_REFUSED(&s, NULL, "behavior Removed");
    s.pre = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
            "{\"Regex\":\"(unclosed\"},\"behavior\":\"Isolated\"},{\"type\":\"ByteLevel\","
            "\"use_regex\":false,\"add_prefix_space\":false}]}";
    EXPECT_REFUSED(&s, NULL, "(unclosed");
    s.pre = NULL;
    s.normalizer = "{\"type\":\"NFC\"}";
    EXPECT_REFUSED(&s, NULL, "normalizer NFC");
    s.normalizer = NULL;
    s.decoder = "{\"type\":\"Metaspace\"}";
    EXPECT_REFUSED(&s, NULL, "decoder Metaspace");
    s.decoder = "null";
    EXPECT_REFUSED(&s, NULL, "decoder");
    s.decoder = NULL;
    s.merges = "\"a b\",\"q zz\"";
    s.extra = "\"ab\":256";
    EXPECT_REFUSED(&s, NULL, "merges[1] \"q zz\": \"zz\" is not in the vocabulary");
    s.merges = "\"a c\"";
    EXPECT_REFUSED(&s, NULL, "merges[0] \"a c\": the merged token");
    s.merges = "\"a b c\"";
    EXPECT_REFUSED(&s, NULL, "merges[0]");
    s.merges = NULL;
    s.extra = "\"ab\":65";
    EXPECT_REFUSED(&s, NULL, "id 65");
    s.extra = NULL;
    EXPECT_REFUSED(NULL, "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":"
                         "\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"ab\":0},"
                         "\"merges\":[]}}", "no single-byte token");
    s.added = "{\"id\":66,\"content\":\"<|x|>\",\"special\":true}";
    EXPECT_REFUSED(&s, NULL, "added_tokens[0] \"<|x|>\" has id 66");
    s.added = NULL;
    s.model_keys = "\"dropout\":0.1,";
    EXPECT_REFUSED(&s, NULL, "dropout");
    s.model_keys = "\"continuing_subword_prefix\":\"##\",";
    EXPECT_REFUSED(&s, NULL, "continuing_subword_prefix");
    EXPECT_REFUSED(NULL, "{\"model\": {\"type\": \"BPE\",", "invalid JSON");
    EXPECT_REFUSED(NULL, "[1, 2]", "expected a JSON object");
    EXPECT_REFUSED(NULL, "{\"model\": 3}", "model must be an object");

    char err[512] = "";
    tokenizer *t = NULL;
    const char *missing = tmp_path("does_not_exist.json");
    CHECK(tokenizer_load(&t, missing, err, sizeof err) == -1 && strstr(err, missing) &&
          strstr(err, "cannot read"), "missing file: %s", err);
}

static void test_decode_errors(void)
{
    spec s = {.skip_byte = -1};
    tokenizer *t = load_spec(&s, "decode.json");
    if (!t) return;
    const int32_t ids[] = {72, 105, 256, 3};
    char *out = NULL, err[512] = "";
    size_t len;
    CHECK(tokenizer_decode(t, ids, 4, &out, &len, err, sizeof err) == -1 && !out &&
              strstr(err, "256") && strstr(err, "position 2"),
          "decode of id 256: %s", err);
    const int32_t neg[] = {-1};
    CHECK(tokenizer_decode(t, neg, 1, &out, &len, err, sizeof err) == -1 && strstr(err, "-1"),
          "decode of id -1: %s", err);
    CHECK(tokenizer_decode(t, ids, 0, &out, &len, err, sizeof err) == 0 && len == 0 &&
          out && out[0] == 0, "decode of nothing");
    free(out);
    tokenizer_free(t);
}

int main(void)
{
    snprintf(tmp_dir, sizeof tmp_dir, "%s/test_tokenizer_%d", SHARDNODE_TEST_TMP,
             (int)getpid());
    if (mkdir(tmp_dir, 0755) != 0) {
        fprintf(stderr, "cannot create %s\n", tmp_dir);
        return 2;
    }
    test_byte_alphabet();
    test_lowest_rank_first();
    test_llama3_style();
    test_gpt2_file_shape();
    test_raw_vocab_string();
    test_specials();
    test_round_trip_random();
    test_save_load_same();
    test_training_deterministic();
    test_refusals();
    test_missing_bytes_and_config_eos();
    test_decode_errors();
    DIR *d = opendir(tmp_dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlink(tmp_path(e->d_name));
    if (d) closedir(d);
    rmdir(tmp_dir);
    if (failures) {
        fprintf(stderr, "test_tokenizer: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_tokenizer: ok\n");
    return 0;
}

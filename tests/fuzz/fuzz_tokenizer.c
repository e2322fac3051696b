/* fuzz_tokenizer.c — libFuzzer target for HF tokenizer.json files
 * (model/tokenizer_json.c), which a job names and users download.
 *
 * The input is the whole file. tokenizer_load must refuse anything
 * malformed with a one-line message, including the split regex it compiles
 * with PCRE2. Every tokenizer it accepts must keep its promise on text:
 * decode(encode(s)) == s (unless it adds a prefix space, as HF's ByteLevel
 * add_prefix_space does, or s holds a byte its vocabulary has no token for:
 * encoding drops those, as HF does) for a fixed text and for the input's own bytes
 * (capped), with and without special tokens, and every id inside the
 * vocabulary; it must save, and the saved file must load back to a
 * tokenizer that encodes the same way. */
#include "fuzz_util.h"
#include "model.h"

#define T "fuzz_tokenizer"

static bool prefix_space;   /* the tokenizer under test adds a space before a text */
static bool missing[256];   /* bytes without a token: encoding drops them (model.h) */

/* Whether text holds a byte the tokenizer has no token for. */
static bool has_missing(const char *text, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (missing[(unsigned char)text[i]]) return true;
    return false;
}

static void round_trip(const tokenizer *t, const char *text, size_t len, bool special,
                       int32_t **ids_out, size_t *n_out)
{
    char err[512];
    int32_t *ids;
    size_t n;
    fuzz_require(tokenizer_encode(t, text, len, special, &ids, &n, err, sizeof err) == 0, T,
                 "an accepted tokenizer does not encode", err);
    int V = tokenizer_vocab_size(t);
    for (size_t i = 0; i < n; i++)
        fuzz_require(ids[i] >= 0 && ids[i] < V, T, "an id outside the vocabulary", NULL);
    char *back;
    size_t blen;
    fuzz_require(tokenizer_decode(t, ids, n, &back, &blen, err, sizeof err) == 0, T,
                 "its own ids do not decode", err);
    /* With ByteLevel's add_prefix_space (HF's default when the key is
     * absent), encoding puts a space before each piece of text that does
     * not start with one (the text, and each piece after an added token),
     * and decoding keeps them, as HF does: the identity holds without it. */
    /* the promise covers texts whose bytes all have a token */
    if (!prefix_space && !has_missing(text, len))
        fuzz_require(blen == len && memcmp(back, text, len) == 0, T,
                     "decode(encode(s)) differs from s", NULL);
    free(back);
    if (ids_out) {
        *ids_out = ids;
        *n_out = n;
    } else {
        free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char text[] = "In the beginning, 1234 caf\xc3\xa9s <|endoftext|> and\r\n  "
                               "\xff\xfe bytes' it's  \t 42";
    char path[512], saved[512], err[512];
    fuzz_write_file("tokenizer.json", data, size, path, sizeof path);
    tokenizer *t;
    memset(err, 'x', sizeof err);
    if (tokenizer_load(&t, path, err, sizeof err) != 0) {
        fuzz_check_refusal(T, err, sizeof err);
        return 0;
    }
    unsigned char mb[256];
    int nm = tokenizer_missing_bytes(t, mb);
    memset(missing, 0, sizeof missing);
    for (int i = 0; i < nm && i < 256; i++) missing[mb[i]] = true;
    prefix_space = true;   /* not known yet: the probe itself is not held to the identity */
    int32_t *ids;
    size_t n;
    round_trip(t, "x", 1, false, &ids, &n);
    char *x;
    size_t xlen;
    fuzz_require(tokenizer_decode(t, ids, n, &x, &xlen, err, sizeof err) == 0, T, "decode", err);
    prefix_space = xlen == 2 && memcmp(x, " x", 2) == 0;
    free(x);
    free(ids);
    round_trip(t, text, sizeof text - 1, false, &ids, &n);
    round_trip(t, text, sizeof text - 1, true, NULL, NULL);
    round_trip(t, (const char *)data, size < 512 ? size : 512, false, NULL, NULL);
    fuzz_write_file("saved.json", "", 0, saved, sizeof saved);
    fuzz_require(tokenizer_save(t, saved, err, sizeof err) == 0, T,
                 "an accepted tokenizer does not save", err);
    tokenizer *u;
    fuzz_require(tokenizer_load(&u, saved, err, sizeof err) == 0, T,
                 "a saved tokenizer does not load", err);
    fuzz_require(tokenizer_vocab_size(u) == tokenizer_vocab_size(t), T,
                 "the vocabulary changed in a save and load", NULL);
    int32_t *ids2;
    size_t n2;
    round_trip(u, text, sizeof text - 1, false, &ids2, &n2);
    fuzz_require(n2 == n && memcmp(ids, ids2, n * sizeof *ids) == 0, T,
                 "a saved and loaded tokenizer encodes differently", NULL);
    free(ids);
    free(ids2);
    tokenizer_free(u);
    tokenizer_free(t);
    return 0;
}

/* fuzz_data.c — libFuzzer target for training corpora: plain text and
 * JSONL (model/data_build.c), tokenized into the token cache, and the token
 * cache itself as data_open maps it back (model/data.c), a file in the
 * job's out_dir.
 *
 * A small tokenizer is trained once (fixed texts, so runs repeat). The first
 * input byte sets the spec: bit 0 JSONL or text, bits 1-2 the sequence
 * length (3, 8, 16 or 33), bit 3 a "\n\n" separator, bit 4 a validation
 * share of 0.2 (else 0.05), bit 5 a prompt template of our own; bit 6 set
 * makes the rest a patch of the cache instead of a corpus (below). Without
 * bit 6 the rest is the corpus, cut into two files at "\n#--\n".
 *
 * Every refusal is one line. Every corpus data_open accepts must give
 * windows whose ids are in the vocabulary and whose labels are -100 or in
 * the vocabulary, for any sample of training or validation; opening it
 * again must read the cache back (from_cache) with the same figures.
 *
 * Cache mode: a valid cache of a fixed corpus is written once; the rest of
 * the input is a list of (offset: 2 bytes LE, byte) patches applied to it,
 * and data_open must either rebuild the cache (a damaged one is never
 * used) or read windows inside the vocabulary from it. */
#include "fuzz_util.h"
#include "model.h"

#define T "fuzz_data"

static tokenizer *tok;
static int vocab;

static void init(void)
{
    if (tok)
        return;
    static const char *const texts[] = {
        "In the beginning God created the heaven and the earth.",
        "{\"instruction\": \"Say hi\", \"input\": \"\", \"output\": \"hi\"}\n",
        "And the earth was without form, and void; 1234 5678"};
    size_t lens[3];
    for (int i = 0; i < 3; i++)
        lens[i] = strlen(texts[i]);
    const char *specials[] = {"<|endoftext|>"};
    char err[512];
    fuzz_require(tokenizer_train(&tok, texts, lens, 3, 300, specials, 1, err, sizeof err) == 0,
                 T, "cannot train the tokenizer", err);
    vocab = tokenizer_vocab_size(tok);
}

static void check_windows(const data_set *d, int seq)
{
    int32_t ids[2 * 34], labels[2 * 34];
    const data_info *info = data_get_info(d);
    fuzz_require(info->train_windows == data_train_samples(d) &&
                     info->val_windows == data_val_samples(d) && data_train_samples(d) > 0,
                 T, "window counts disagree", NULL);
    for (int64_t step = 0; step < 3; step++) {
        data_train_batch(d, 7, step, 0, 2, 2, ids, labels);
        for (int i = 0; i < 2 * seq; i++) {
            fuzz_require(ids[i] >= 0 && ids[i] < vocab, T, "a training id outside the vocabulary",
                         NULL);
            fuzz_require(labels[i] == -100 || (labels[i] >= 0 && labels[i] < vocab), T,
                         "a training label outside the vocabulary", NULL);
        }
    }
    data_val_batch(d, 0, 2, ids, labels);
    for (int i = 0; i < 2 * seq; i++)
        fuzz_require(ids[i] >= 0 && ids[i] < vocab &&
                         (labels[i] == -100 || (labels[i] >= 0 && labels[i] < vocab)),
                     T, "a validation id or label outside the vocabulary", NULL);
}

static int open_checked(const data_spec *spec, const char *cache, data_set **d)
{
    char err[512];
    memset(err, 'x', sizeof err);
    if (data_open(d, spec, tok, cache, err, sizeof err) != 0) {
        fuzz_check_refusal(T, err, sizeof err);
        return -1;
    }
    check_windows(*d, spec->seq_len);
    return 0;
}

static void corpus(uint8_t mode, const uint8_t *data, size_t size)
{
    static const int seqs[] = {3, 8, 16, 33};
    char f1[512], f2[512], cache[512];
    size_t n1, n2;
    const uint8_t *p2;
    fuzz_split(data, size, "\n#--\n", &n1, &p2, &n2);
    fuzz_write_file((mode & 1) ? "a.jsonl" : "a.txt", data, n1, f1, sizeof f1);
    fuzz_write_file((mode & 1) ? "b.jsonl" : "b.txt", p2, n2, f2, sizeof f2);
    snprintf(cache, sizeof cache, "%s/cache.bin", fuzz_dir());
    unlink(cache);
    const char *files[] = {f1, f2};
    data_spec spec = {files, n2 || p2 != data + size ? 2 : 1, (mode & 1) ? DATA_JSONL : DATA_TEXT,
                      (mode & 8) ? "\n\n" : NULL,
                      (mode & 32) ? "Q: {instruction} / {input}\nA: " : NULL,
                      (mode & 16) ? 0.2 : 0.05, seqs[(mode >> 1) & 3]};
    data_set *d;
    if (open_checked(&spec, cache, &d) != 0)
        return;
    data_info first = *data_get_info(d);
    data_close(d);
    data_set *again;
    fuzz_require(open_checked(&spec, cache, &again) == 0, T, "its own cache does not open", NULL);
    const data_info *second = data_get_info(again);
    fuzz_require(second->from_cache && second->train_windows == first.train_windows &&
                     second->val_windows == first.val_windows &&
                     second->documents == first.documents &&
                     second->corpus_tokens == first.corpus_tokens,
                 T, "the cache reads back different figures", NULL);
    data_close(again);
}

static uint8_t *valid_cache;
static size_t valid_len;

static void patched_cache(const uint8_t *data, size_t size)
{
    static const char corpus_text[] =
        "{\"instruction\": \"Say hi\", \"input\": \"\", \"output\": \"hi there\"}\n"
        "{\"messages\": [{\"role\": \"user\", \"content\": \"1234\"}, "
        "{\"role\": \"assistant\", \"content\": \"5678\"}]}\n"
        "{\"instruction\": \"Count\", \"input\": \"1 2\", \"output\": \"3 4 5\"}\n";
    static char file[512], cache[512];
    const char *files[] = {file};
    data_spec spec = {files, 1, DATA_JSONL, NULL, "{instruction}{input}", 0.3, 33};
    if (!valid_cache) {
        fuzz_write_file("fixed.jsonl", corpus_text, sizeof corpus_text - 1, file, sizeof file);
        snprintf(cache, sizeof cache, "%s/fixed-cache.bin", fuzz_dir());
        data_set *d;
        char err[512];
        fuzz_require(data_open(&d, &spec, tok, cache, err, sizeof err) == 0, T,
                     "the fixed corpus does not open", err);
        data_close(d);
        valid_cache = fuzz_read_file(T, cache, &valid_len);
    }
    size_t len;   /* 0xffff patches give a truncated cache */
    uint8_t *bytes = fuzz_patch(valid_cache, valid_len, data, size, &len);
    FILE *f = fopen(cache, "wb");
    fuzz_require(f && (len == 0 || fwrite(bytes, 1, len, f) == len) && fclose(f) == 0, T,
                 "cannot write the cache", cache);
    free(bytes);
    data_set *d;
    if (open_checked(&spec, cache, &d) == 0)
        data_close(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    init();
    if (data[0] & 64)
        patched_cache(data + 1, size - 1);
    else
        corpus(data[0], data + 1, size - 1);
    return 0;
}

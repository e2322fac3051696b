/* test_data.c — the training data pipeline (model/data.c).
 *
 * What a user relies on: a batch is a pure function of (seed, step,
 * micro-batch), so a resumed run or another node sees exactly the same data;
 * an epoch uses every training window once; validation never shares a
 * window with training; instruction data teaches only the answers; the
 * token cache is reused while nothing changed and rebuilt when anything did;
 * a bad corpus gets one message naming the file (and line) at fault. The
 * tokenizer is a tiny real one trained here with tokenizer_train. */
#include "model.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static tokenizer *tok;
static int32_t EOS;

/* ---- helpers ---------------------------------------------------------------- */

/* A per-process path in the build's temp dir; 16 rotating buffers, more
 * than any test holds at once. */
static const char *path_for(const char *name)
{
    static char bufs[16][512];
    static int next;
    char *p = bufs[next++ % 16];
    snprintf(p, 512, "%s/data_%d_%s", SHARDNODE_TEST_TMP, (int)getpid(), name);
    return p;
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "wb");
    if (!fp || fputs(text, fp) == EOF || fclose(fp) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
}

static int32_t *enc(const char *s, bool special, size_t *n)
{
    int32_t *ids = NULL;
    char err[256];
    if (tokenizer_encode(tok, s, strlen(s), special, &ids, n, err, sizeof err) != 0) {
        fprintf(stderr, "encode: %s\n", err);
        exit(2);
    }
    return ids;
}

/* "n0 n0+1 ... n1-1" with a space after each number: every run of a few
 * numbers is unique, so equal windows mean the same window. */
static char *numbers(int n0, int n1)
{
    char *s = malloc((size_t)(n1 - n0) * 12 + 1), *p = s;
    *p = 0;
    for (int i = n0; i < n1; i++) p += sprintf(p, "%d ", i);
    return s;
}

static data_spec text_spec(const char *const *files, int nfiles, const char *sep, double val, int T)
{
    return (data_spec){.files = files, .nfiles = nfiles, .format = DATA_TEXT, .separator = sep,
                       .val_fraction = val, .seq_len = T};
}

static data_set *open_ok(int line, const data_spec *sp, const tokenizer *t, const char *cache)
{
    data_set *d = NULL;
    char err[512] = "";
    if (data_open(&d, sp, t, cache, err, sizeof err) != 0) {
        failures++;
        fprintf(stderr, "%s:%d: FAIL: data_open: %s\n", __FILE__, line, err);
        return NULL;
    }
    return d;
}
#define OPEN_OK(sp, cache) open_ok(__LINE__, sp, tok, cache)

/* data_open must fail, leave *out NULL, no .tmp behind, and say each needle. */
static void expect_fail(int line, const data_spec *sp, const char *cache, const char *n1,
                        const char *n2)
{
    data_set *d = (data_set *)1;
    char err[512] = "", tmp[600];
    int rc = data_open(&d, sp, tok, cache, err, sizeof err);
    snprintf(tmp, sizeof tmp, "%s.tmp", cache);
    if (rc != -1 || d != NULL || !strstr(err, n1) || (n2 && !strstr(err, n2)) ||
        access(tmp, F_OK) == 0) {
        failures++;
        fprintf(stderr, "%s:%d: FAIL: expected an error with '%s' and '%s'\n  rc=%d message: %s\n",
                __FILE__, line, n1, n2 ? n2 : "", rc, err);
    }
    if (rc == 0) data_close(d);
}
#define EXPECT_FAIL(sp, cache, n1, n2) expect_fail(__LINE__, sp, cache, n1, n2)

/* Every training window of one epoch, in window order (row w = window w),
 * rebuilt from batches: ids [n, T] and the last label of each. */
static int32_t *train_windows(const data_set *d, int T, uint64_t seed)
{
    int64_t n = data_train_samples(d);
    int32_t *rows = calloc((size_t)n * (size_t)(T + 1), sizeof *rows);
    int32_t *ids = malloc((size_t)T * sizeof *ids), *lab = malloc((size_t)T * sizeof *lab);
    for (int64_t i = 0; i < n; i++) {
        data_train_batch(d, seed, i, 0, 1, 1, ids, lab);
        int64_t w = data_train_window(d, seed, i);
        memcpy(rows + w * (T + 1), ids, (size_t)T * sizeof *ids);
        rows[w * (T + 1) + T] = lab[T - 1];
    }
    free(ids);
    free(lab);
    return rows;
}

/* ---- determinism and the permutation ---------------------------------------- */

static void test_permutation(void)
{
    char *seen = malloc(100003);
    for (uint64_t n = 1; n <= 300; n++) {
        for (uint64_t seed = 0; seed < 3; seed++) {
            memset(seen, 0, n);
            int bad = 0, moved = 0;
            for (uint64_t x = 0; x < n; x++) {
                uint64_t y = data_permute(n, seed, 5, x);
                if (y >= n || seen[y]++) bad++;
                else moved += y != x;
            }
            CHECK(bad == 0, "n %llu seed %llu: not a bijection", (unsigned long long)n,
                  (unsigned long long)seed);
            CHECK(n < 16 || moved > (int)n / 2, "n %llu: only %d of %llu moved",
                  (unsigned long long)n, moved, (unsigned long long)n);
        }
    }
    uint64_t n = 100003;   /* prime, just above a power of two: long cycle walks */
    int bad = 0, same_epochs = 0, same_seeds = 0;
    memset(seen, 0, n);
    for (uint64_t x = 0; x < n; x++) {
        uint64_t y = data_permute(n, 42, 0, x);
        if (y >= n || seen[y]++) bad++;
        same_epochs += y == data_permute(n, 42, 1, x);
        same_seeds += y == data_permute(n, 43, 0, x);
    }
    CHECK(bad == 0, "n 100003: not a bijection");
    CHECK(same_epochs < 100 && same_seeds < 100, "epochs %d seeds %d agree", same_epochs,
          same_seeds);
    free(seen);
}

static void test_batches_are_pure(void)
{
    const char *file = path_for("pure.txt");
    char *text = numbers(0, 2500);
    write_text(file, text);
    free(text);
    const char *files[] = {file};
    data_spec sp = text_spec(files, 1, NULL, 0.1, 16);
    const char *cacheA = path_for("pureA.cache"), *cacheB = path_for("pureB.cache");
    unlink(cacheA);
    unlink(cacheB);
    data_set *a = OPEN_OK(&sp, cacheA);
    data_set *b = OPEN_OK(&sp, cacheB);   /* tokenized again, separately */
    if (!a || !b) return;
    enum { MB = 3, GB = 6, T = 16, STEPS = 8 };
    static int32_t ia[STEPS][2][MB * T], la[STEPS][2][MB * T], ib[MB * T], lb[MB * T];
    for (int s = 0; s < STEPS; s++)
        for (int m = 0; m < 2; m++) data_train_batch(a, 7, s, m, MB, GB, ia[s][m], la[s][m]);
    data_close(a);
    a = OPEN_OK(&sp, cacheA);   /* from the cache this time */
    if (!a) return;
    CHECK(data_get_info(a)->from_cache && !data_get_info(b)->from_cache, "cache flags");
    int diff = 0;
    /* Asked in any order, by any data set: the same rows. */
    for (int s = STEPS - 1; s >= 0; s--) {
        for (int m = 1; m >= 0; m--) {
            data_train_batch(a, 7, s, m, MB, GB, ib, lb);
            diff += memcmp(ib, ia[s][m], sizeof ib) != 0 || memcmp(lb, la[s][m], sizeof lb) != 0;
            data_train_batch(b, 7, s, m, MB, GB, ib, lb);
            diff += memcmp(ib, ia[s][m], sizeof ib) != 0 || memcmp(lb, la[s][m], sizeof lb) != 0;
        }
    }
    CHECK(diff == 0, "%d batches differ when rebuilt", diff);
    /* One micro-batch of 6 is the two micro-batches of 3 of the same step. */
    static int32_t i6[2 * MB * T], l6[2 * MB * T];
    data_train_batch(a, 7, 3, 0, 2 * MB, GB, i6, l6);
    CHECK(memcmp(i6, ia[3][0], sizeof ia[3][0]) == 0 &&
          memcmp(i6 + MB * T, ia[3][1], sizeof ia[3][1]) == 0, "micro-batch split changes rows");
    /* Text labels are the next token. */
    int shifted = 0;
    for (int r = 0; r < MB; r++)
        for (int j = 0; j + 1 < T; j++) shifted += la[2][1][r * T + j] == ia[2][1][r * T + j + 1];
    CHECK(shifted == MB * (T - 1), "labels are not ids shifted by one");
    /* Different steps (and seeds) see different windows. */
    int same = 0;
    for (int s = 1; s < STEPS; s++) same += memcmp(ia[0][0], ia[s][0], T * sizeof(int32_t)) == 0;
    CHECK(same == 0, "step 0's first row appears at %d other steps", same);
    data_train_batch(a, 8, 0, 0, MB, GB, ib, lb);
    CHECK(memcmp(ib, ia[0][0], sizeof ib) != 0, "seed does not change the order");
    data_close(a);
    data_close(b);
    unlink(cacheA);
    unlink(cacheB);
    unlink(file);
}

static void test_epoch_uses_every_window_once(void)
{
    const char *file = path_for("epoch.txt");
    char *text = numbers(0, 1500);
    write_text(file, text);
    free(text);
    const char *files[] = {file};
    data_spec sp = text_spec(files, 1, NULL, 0, 8);
    const char *cache = path_for("epoch.cache");
    data_set *d = OPEN_OK(&sp, cache);
    if (!d) return;
    const int T = 8, GB = 5, MB = 5;
    int64_t n = data_train_samples(d);
    CHECK(n > 50, "only %lld windows", (long long)n);
    CHECK(data_train_tokens(d) == n * T, "tokens %lld", (long long)data_train_tokens(d));
    /* Window indices: each epoch a permutation, a different one each epoch. */
    char *seen = calloc((size_t)n, 1);
    int bad = 0, same_order = 0;
    for (int e = 0; e < 3; e++) {
        memset(seen, 0, (size_t)n);
        for (int64_t i = e * n; i < (e + 1) * n; i++) {
            int64_t w = data_train_window(d, 99, i);
            if (w < 0 || w >= n || seen[w]++) bad++;
            if (e == 1) same_order += w == data_train_window(d, 99, i - n);
        }
    }
    CHECK(bad == 0, "%d windows out of range or repeated within an epoch", bad);
    CHECK(same_order < n / 4, "epochs 0 and 1 share %d positions of %lld", same_order, (long long)n);
    /* And by content: the rows of epoch 0's batches are n distinct windows,
     * with a batch size that does not divide n, so an epoch ends mid-batch. */
    int32_t *rows = malloc((size_t)(n + GB) * T * sizeof *rows), lab[5 * 8];
    for (int64_t s = 0; s * GB < n; s++) data_train_batch(d, 99, s, 0, MB, GB, rows + s * GB * T, lab);
    int dup = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i + 1; j < n; j++) dup += memcmp(rows + i * T, rows + j * T, T * sizeof *rows) == 0;
    CHECK(dup == 0, "%d repeated windows in one epoch", dup);
    /* The first sample of epoch 1 is a window of epoch 0 again. */
    int32_t ids1[8], lab1[8];
    data_train_batch(d, 99, n, 0, 1, 1, ids1, lab1);
    int found = 0;
    for (int64_t i = 0; i < n; i++) found += memcmp(rows + i * T, ids1, sizeof ids1) == 0;
    CHECK(found == 1, "epoch 1's first window found %d times in epoch 0", found);
    free(rows);
    free(seen);
    data_close(d);
    unlink(cache);
    unlink(file);
}

/* ---- text documents ----------------------------------------------------------- */

static void test_separator_and_files(void)
{
    const char *f1 = path_for("sep1.txt"), *f2 = path_for("sep2.txt");
    const char *cache = path_for("sep.cache");
    write_text(f1, "@@alpha beta@@gamma@@@@delta@@");
    write_text(f2, "one file, one document");
    size_t na, nb, nc, nd;
    int32_t *a = enc("alpha beta", false, &na), *b = enc("gamma", false, &nb);
    int32_t *c = enc("delta", false, &nc), *dd = enc("one file, one document", false, &nd);
    /* Expected stream: alpha beta EOS gamma EOS delta EOS one file... */
    size_t n = na + nb + nc + nd + 3, k = 0;
    int32_t *want = malloc(n * sizeof *want);
    memcpy(want + k, a, na * 4), k += na, want[k++] = EOS;
    memcpy(want + k, b, nb * 4), k += nb, want[k++] = EOS;
    memcpy(want + k, c, nc * 4), k += nc, want[k++] = EOS;
    memcpy(want + k, dd, nd * 4), k += nd;
    const char *files[] = {f1, f2};
    data_spec sp = text_spec(files, 2, "@@", 0, (int)n - 1);   /* exactly one window */
    data_set *d = OPEN_OK(&sp, cache);
    if (d) {
        int T = (int)n - 1;
        int32_t *ids = malloc(n * 4), *lab = malloc(n * 4);
        CHECK(data_get_info(d)->documents == 4, "documents %lld",
              (long long)data_get_info(d)->documents);
        CHECK(data_train_samples(d) == 1 && data_val_samples(d) == 0, "windows");
        data_train_batch(d, 1, 0, 0, 1, 1, ids, lab);
        ids[T] = lab[T - 1];
        CHECK(memcmp(ids, want, n * 4) == 0, "stream is not the documents joined by EOS");
        free(ids);
        free(lab);
        data_close(d);
    }
    /* Without a separator each file is one document: the @@ stay text. */
    sp.separator = NULL;
    sp.seq_len = 4;
    d = OPEN_OK(&sp, cache);
    if (d) {
        CHECK(data_get_info(d)->documents == 2, "documents %lld",
              (long long)data_get_info(d)->documents);
        data_close(d);
    }
    free(a), free(b), free(c), free(dd), free(want);
    unlink(cache), unlink(f1), unlink(f2);
}

static void check_disjoint(const data_set *d, int T)
{
    int64_t nt = data_train_samples(d), nv = data_val_samples(d);
    int32_t *tr = train_windows(d, T, 5);
    int32_t *va = malloc((size_t)nv * (size_t)T * sizeof *va), *vl = malloc((size_t)nv * (size_t)T * 4);
    data_val_batch(d, 0, (int)nv, va, vl);
    int shared = 0;
    for (int64_t i = 0; i < nt; i++)
        for (int64_t j = 0; j < nv; j++) shared += memcmp(tr + i * (T + 1), va + j * T, (size_t)T * 4) == 0;
    CHECK(shared == 0, "%d windows both in training and validation", shared);
    /* Validation rows come in a fixed order and wrap around. */
    int32_t row[64], lab[64];
    data_val_batch(d, nv, 1, row, lab);
    CHECK(memcmp(row, va, (size_t)T * 4) == 0, "validation does not wrap around");
    free(tr), free(va), free(vl);
}

static void test_validation_split(void)
{
    enum { T = 12 };
    const char *file = path_for("split.txt"), *cache = path_for("split.cache");
    /* 40 documents: split by document. */
    char *text = calloc(1, 40 * 600), *p = text;
    for (int doc = 0; doc < 40; doc++) {
        char *nums = numbers(doc * 60, doc * 60 + 60);
        p += sprintf(p, "%s\n---\n", nums);
        free(nums);
    }
    write_text(file, text);
    free(text);
    const char *files[] = {file};
    data_spec sp = text_spec(files, 1, "\n---\n", 0.2, T);
    data_set *d = OPEN_OK(&sp, cache);
    if (d) {
        const data_info *in = data_get_info(d);
        CHECK(in->documents == 40 && !in->split_by_window, "documents %lld by window %d",
              (long long)in->documents, in->split_by_window);
        double share = (double)data_val_samples(d) / (double)(data_val_samples(d) + data_train_samples(d));
        CHECK(share > 0.05 && share < 0.45, "validation share %.2f for val_fraction 0.2", share);
        check_disjoint(d, T);
        data_close(d);
    }
    /* One document (a book in one file): split by window, still disjoint. */
    sp.separator = NULL;
    sp.val_fraction = 0.01;
    d = OPEN_OK(&sp, cache);
    if (d) {
        CHECK(data_get_info(d)->split_by_window && data_val_samples(d) >= 1, "val %lld",
              (long long)data_val_samples(d));
        check_disjoint(d, T);
        data_close(d);
    }
    /* val_fraction 0: no validation; a validation batch is all padding. */
    sp.val_fraction = 0;
    d = OPEN_OK(&sp, cache);
    if (d) {
        int32_t ids[T], lab[T];
        CHECK(data_val_samples(d) == 0, "val %lld", (long long)data_val_samples(d));
        data_val_batch(d, 0, 1, ids, lab);
        CHECK(ids[0] == EOS && lab[T - 1] == -100, "empty validation batch");
        data_close(d);
    }
    unlink(cache), unlink(file);
}

/* ---- JSONL ----------------------------------------------------------------------- */

typedef struct {
    int32_t ids[256];
    char learn[256];
    size_t n;
} seq;

static void add(seq *s, const char *text, char learn)
{
    size_t n;
    int32_t *ids = enc(text, true, &n);
    for (size_t i = 0; i < n; i++) s->ids[s->n] = ids[i], s->learn[s->n++] = learn;
    free(ids);
}

static void add_eos(seq *s) { s->ids[s->n] = EOS, s->learn[s->n++] = 1; }

/* The row must be exactly s cut to T+1 tokens: ids padded with EOS, labels
 * the next token where learned, else -100. */
static void check_row(int line, const int32_t *ids, const int32_t *lab, const seq *s, int T)
{
    int bad = 0;
    for (int j = 0; j < T; j++) {
        int32_t wi = (size_t)j < s->n ? s->ids[j] : EOS;
        int32_t wl = (size_t)j + 1 < s->n && s->learn[j + 1] ? s->ids[j + 1] : -100;
        if (ids[j] != wi || lab[j] != wl) {
            if (!bad++)
                fprintf(stderr, "%s:%d: FAIL: position %d: id %d label %d, want %d %d\n",
                        __FILE__, line, j, ids[j], lab[j], wi, wl);
        }
    }
    failures += bad != 0;
}

static void test_jsonl_masks(void)
{
    enum { T = 80 };
    const char *file = path_for("sft.jsonl"), *cache = path_for("sft.cache");
    write_text(file,
               "{\"instruction\": \"Add 2 and 3.\", \"input\": \"\", \"output\": \"5\"}\n"
               "\r\n"
               "{\"instruction\": \"Translate\", \"input\": \"chat\", \"output\": \"cat\"}\r\n"
               "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
               " {\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello!\"},"
               " {\"role\": \"user\", \"content\": \"Bye\"}, {\"role\": \"assistant\", \"content\": \"Bye!\"},"
               " {\"role\": \"user\", \"content\": \"unanswered\"}]}\n"
               "{\"instruction\": \"Say a long thing\", \"output\": \"the quick brown fox jumps over the "
               "lazy dog and then the quick brown fox jumps over the lazy dog once more\"}\n"
               "{\"instruction\": \"This instruction is far too long to leave any room for an "
               "answer in a window of eighty-one tokens, so the example is dropped: it goes on "
               "and on, and the answer would only ever be cut off, so there is nothing to learn "
               "from it at all, not even the end of text token\", \"output\": \"x\"}");
    seq s[4];
    memset(s, 0, sizeof s);
    add(&s[0], "### Instruction:\nAdd 2 and 3.\n\n### Response:\n", 0);
    add(&s[0], "5", 1);
    add_eos(&s[0]);
    add(&s[1], "### Instruction:\nTranslate\n\n### Input:\nchat\n\n### Response:\n", 0);
    add(&s[1], "cat", 1);
    add_eos(&s[1]);
    add(&s[2], "system: Be brief.\nuser: Hi\nassistant: ", 0);
    add(&s[2], "Hello!", 1);
    add_eos(&s[2]);
    add(&s[2], "user: Bye\nassistant: ", 0);
    add(&s[2], "Bye!", 1);
    add_eos(&s[2]);
    add(&s[3], "### Instruction:\nSay a long thing\n\n### Response:\n", 0);
    add(&s[3], "the quick brown fox jumps over the lazy dog and then the quick brown fox jumps "
               "over the lazy dog once more", 1);
    add_eos(&s[3]);
    CHECK(s[3].n > T + 1 && s[1].n <= T && s[2].n <= T, "test sizes: %zu %zu %zu", s[1].n, s[2].n,
          s[3].n);
    const char *files[] = {file};
    data_spec sp = {.files = files, .nfiles = 1, .format = DATA_JSONL, .seq_len = T};
    data_set *d = OPEN_OK(&sp, cache);
    if (d) {
        const data_info *in = data_get_info(d);
        CHECK(in->documents == 5 && in->truncated == 2 && in->dropped == 1,
              "documents %lld truncated %lld dropped %lld", (long long)in->documents,
              (long long)in->truncated, (long long)in->dropped);
        CHECK(data_train_samples(d) == 4, "%lld examples", (long long)data_train_samples(d));
        int64_t tokens = 0;
        for (int e = 0; e < 4; e++) tokens += s[e].n > T ? T : (int64_t)s[e].n - 1;
        CHECK(data_train_tokens(d) == tokens, "tokens %lld, want %lld",
              (long long)data_train_tokens(d), (long long)tokens);
        int32_t ids[T], lab[T];
        for (int64_t i = 0; i < 4; i++) {
            data_train_batch(d, 3, i, 0, 1, 1, ids, lab);
            int64_t w = data_train_window(d, 3, i);   /* with no validation, w is the example */
            check_row(__LINE__, ids, lab, &s[w], T);
        }
        data_close(d);
    }
    /* A template of one's own, fields in any order; braces it does not know stay. */
    write_text(file, "{\"output\": \"cat\", \"input\": \"chat\", \"instruction\": \"Translate\"}\n");
    sp.prompt_template = "{input} ({instruction}) {x}=";
    d = OPEN_OK(&sp, cache);
    if (d) {
        seq t;
        memset(&t, 0, sizeof t);
        add(&t, "chat (Translate) {x}=", 0);
        add(&t, "cat", 1);
        add_eos(&t);
        int32_t ids[T], lab[T];
        data_train_batch(d, 3, 0, 0, 1, 1, ids, lab);
        check_row(__LINE__, ids, lab, &t, T);
        data_close(d);
    }
    unlink(cache), unlink(file);
}

/* ---- cache -------------------------------------------------------------------------- */

static void test_cache_reuse_and_rebuild(void)
{
    enum { T = 10 };
    const char *file = path_for("cache.txt"), *cache = path_for("c.cache");
    char *text = numbers(0, 400);
    write_text(file, text);
    const char *files[] = {file};
    data_spec sp = text_spec(files, 1, NULL, 0, T);
    unlink(cache);
    data_set *d = OPEN_OK(&sp, cache);
    struct stat st1, st2;
    CHECK(d && !data_get_info(d)->from_cache, "first open must tokenize");
    int64_t n1 = d ? data_train_samples(d) : 0;
    data_close(d);
    CHECK(stat(cache, &st1) == 0, "no cache written at %s", cache);
    d = OPEN_OK(&sp, cache);
    CHECK(d && data_get_info(d)->from_cache && data_train_samples(d) == n1, "second open must reuse");
    data_close(d);
    CHECK(stat(cache, &st2) == 0 && st2.st_ino == st1.st_ino &&
          st2.st_mtim.tv_nsec == st1.st_mtim.tv_nsec && st2.st_mtim.tv_sec == st1.st_mtim.tv_sec,
          "the cache was rewritten");

    /* More text: rebuilt, and the new text is there. */
    char *more = numbers(0, 800);
    write_text(file, more);
    d = OPEN_OK(&sp, cache);
    CHECK(d && !data_get_info(d)->from_cache && data_train_samples(d) > n1, "corpus change ignored");
    data_close(d);
    /* Same size, other bytes, only the mtime tells. */
    more[0] = more[0] == '0' ? '9' : '0';
    write_text(file, more);
    struct timespec ts[2] = {{0, UTIME_OMIT}, {st1.st_mtim.tv_sec + 100, 0}};
    utimensat(AT_FDCWD, file, ts, 0);
    d = OPEN_OK(&sp, cache);
    CHECK(d && !data_get_info(d)->from_cache, "same-size change ignored");
    data_close(d);
    /* The spec is part of the fingerprint. */
    sp.seq_len = T + 1;
    d = OPEN_OK(&sp, cache);
    CHECK(d && !data_get_info(d)->from_cache, "seq_len change ignored");
    data_close(d);
    /* So is the tokenizer, even one of the same vocabulary size. */
    tokenizer *t2 = NULL;
    char err[256];
    const char *texts[] = {text};
    size_t lens[] = {strlen(text)};
    const char *specials[] = {"<|endoftext|>"};
    CHECK(tokenizer_train(&t2, texts, lens, 1, 300, specials, 1, err, sizeof err) == 0, "%s", err);
    d = t2 ? open_ok(__LINE__, &sp, t2, cache) : NULL;
    CHECK(d && !data_get_info(d)->from_cache, "tokenizer change ignored");
    data_close(d);
    d = OPEN_OK(&sp, cache);
    CHECK(d && !data_get_info(d)->from_cache, "tokenizer change back ignored");
    data_close(d);
    tokenizer_free(t2);
    /* A damaged cache is rebuilt, not trusted. */
    CHECK(truncate(cache, 100) == 0, "truncate");
    d = OPEN_OK(&sp, cache);
    CHECK(d && !data_get_info(d)->from_cache && data_train_samples(d) > n1, "damaged cache used");
    data_close(d);
    /* So is one whose sizes add up but whose tokens were changed on disk
     * (a flipped bit, another program's write): an id outside the
     * vocabulary would reach the model as if it were data. */
    struct stat st3;
    CHECK(stat(cache, &st3) == 0 && st3.st_size > 256, "no cache");
    FILE *cf = fopen(cache, "r+b");
    int32_t bogus = 0x7fffff00;
    CHECK(cf && fseek(cf, (long)st3.st_size - 64, SEEK_SET) == 0 &&
              fwrite(&bogus, sizeof bogus, 1, cf) == 1 && fclose(cf) == 0,
          "cannot damage the cache");
    d = OPEN_OK(&sp, cache);
    CHECK(d && !data_get_info(d)->from_cache, "a cache holding an id outside the vocabulary used");
    if (d) {
        int32_t ids[4 * (T + 1)], labels[4 * (T + 1)];
        for (int64_t step = 0; step < data_train_samples(d) / 4; step++) {
            data_train_batch(d, 1, step, 0, 4, 4, ids, labels);
            for (int i = 0; i < 4 * T; i++)
                if (ids[i] < 0 || ids[i] >= tokenizer_vocab_size(tok)) {
                    CHECK(0, "step %lld: id %d outside the vocabulary", (long long)step, ids[i]);
                    step = INT64_MAX - 1;
                    break;
                }
        }
    }
    data_close(d);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", cache);
    CHECK(access(tmp, F_OK) != 0, "%s left behind", tmp);
    free(text), free(more);
    unlink(cache), unlink(file);
}

/* ---- errors ----------------------------------------------------------------------------- */

static void test_errors(void)
{
    const char *cache = path_for("err.cache");
    const char *txt = path_for("err.txt"), *missing = path_for("missing.txt");
    const char *files[] = {txt}, *mfiles[] = {missing};
    unlink(missing);
    data_spec sp = text_spec(mfiles, 1, NULL, 0, 256);
    EXPECT_FAIL(&sp, cache, missing, "No such file");

    write_text(txt, "");
    sp = text_spec(files, 1, NULL, 0, 256);
    EXPECT_FAIL(&sp, cache, txt, "empty corpus");
    sp.separator = "\n";
    write_text(txt, "\n\n\n");
    EXPECT_FAIL(&sp, cache, txt, "empty corpus");
    /* The missing one of several files is the one named. */
    const char *two[] = {txt, missing};
    write_text(txt, "some text");
    sp = text_spec(two, 2, NULL, 0, 2);
    EXPECT_FAIL(&sp, cache, missing, "No such file");

    /* Shorter than one sequence: the message the user sees, exactly. */
    char *text = numbers(0, 60), want[700];
    size_t n;
    free(enc(text, false, &n));
    write_text(txt, text);
    sp = text_spec(files, 1, NULL, 0, 256);
    snprintf(want, sizeof want, "%s: %zu tokens, fewer than one sequence of 257 (seq_len 256 + 1)",
             txt, n);
    EXPECT_FAIL(&sp, cache, want, NULL);
    /* One window and a validation share: say why it cannot split. */
    sp.seq_len = (int)n - 1;
    sp.val_fraction = 0.1;
    EXPECT_FAIL(&sp, cache, txt, "too few for both training and validation");
    sp.val_fraction = 1;
    EXPECT_FAIL(&sp, cache, txt, "val_fraction");
    sp.val_fraction = 0;
    sp.seq_len = 0;
    EXPECT_FAIL(&sp, cache, txt, "seq_len");
    free(text);

    /* The cache path cannot be written: named, and nothing tokenized first. */
    sp.seq_len = 8;
    const char *nodir = path_for("no-such-dir/x.cache");
    EXPECT_FAIL(&sp, nodir, nodir, NULL);

    /* JSONL: file and line. */
    const char *jl = path_for("err.jsonl"), *jfiles[] = {jl};
    data_spec js = {.files = jfiles, .nfiles = 1, .format = DATA_JSONL, .seq_len = 32};
    char where[600];
    write_text(jl, "{\"instruction\": \"a\", \"output\": \"b\"}\n{\"instruction\": \"a\", \"output\": }\n");
    snprintf(where, sizeof where, "%s:2: invalid JSON", jl);
    EXPECT_FAIL(&js, cache, where, NULL);
    write_text(jl, "\n\n{\"instruction\": \"a\", \"input\": \"b\"}\n");
    snprintf(where, sizeof where, "%s:3: \"output\" is missing", jl);
    EXPECT_FAIL(&js, cache, where, NULL);
    write_text(jl, "{\"instruction\": \"a\", \"output\": 5}\n");
    snprintf(where, sizeof where, "%s:1: \"output\" is not a string", jl);
    EXPECT_FAIL(&js, cache, where, NULL);
    write_text(jl, "[1, 2]\n");
    snprintf(where, sizeof where, "%s:1: not a JSON object", jl);
    EXPECT_FAIL(&js, cache, where, NULL);
    write_text(jl, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
    snprintf(where, sizeof where, "%s:1: \"messages\" has no assistant turn", jl);
    EXPECT_FAIL(&js, cache, where, NULL);
    write_text(jl, "{\"messages\": [{\"role\": \"user\"}]}\n");
    snprintf(where, sizeof where, "%s:1: messages[0]: \"content\" is missing", jl);
    EXPECT_FAIL(&js, cache, where, NULL);
    write_text(jl, "\n  \n");
    EXPECT_FAIL(&js, cache, jl, "empty corpus");
    write_text(jl, "{\"instruction\": \"a\", \"output\": \"b\"}\n");
    js.val_fraction = 0.1;
    EXPECT_FAIL(&js, cache, jl, "too few for both training and validation");
    unlink(jl), unlink(txt), unlink(cache);
}

int main(void)
{
    static const char train_text[] =
        "In the beginning God created the heaven and the earth. And the earth was without "
        "form, and void; and darkness was upon the face of the deep. The quick brown fox "
        "jumps over the lazy dog. 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 "
        "### Instruction: ### Input: ### Response: system: user: assistant: Hello! Bye!";
    const char *texts[] = {train_text};
    size_t lens[] = {sizeof train_text - 1};
    const char *specials[] = {"<|endoftext|>"};
    char err[256];
    if (tokenizer_train(&tok, texts, lens, 1, 300, specials, 1, err, sizeof err) != 0) {
        fprintf(stderr, "tokenizer_train: %s\n", err);
        return 1;
    }
    EOS = tokenizer_eos_id(tok);
    if (EOS < 0) {
        fprintf(stderr, "the trained tokenizer has no EOS\n");
        return 1;
    }
    test_permutation();
    test_batches_are_pure();
    test_epoch_uses_every_window_once();
    test_separator_and_files();
    test_validation_split();
    test_jsonl_masks();
    test_cache_reuse_and_rebuild();
    test_errors();
    tokenizer_free(tok);
    if (failures) {
        fprintf(stderr, "test_data: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_data: ok\n");
    return 0;
}

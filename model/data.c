/* data.c — the training data pipeline: a token cache and batches that are
 * pure functions of (seed, step, micro-batch).
 *
 * Corpora (read and tokenized by data_build.c)
 * - Text: each file is split into documents at spec->separator (or is one
 *   document); empty documents are skipped. Text is encoded with special
 *   tokens as plain text, so a web page that mentions "<|endoftext|>" does
 *   not end a document. The documents of a side are joined with EOS between
 *   them into one stream, cut into back-to-back windows of T+1 tokens; the
 *   tail shorter than a window is not used. ids = w[0..T-1], labels = w[1..T].
 * - JSONL, one example per non-blank line:
 *   {"instruction", "input" (optional), "output"}: prompt = prompt_template
 *   with {instruction} and {input} replaced (unknown braces stay as written;
 *   the default template leaves out its Input block when input is empty),
 *   answer = output; the example is prompt + answer + EOS.
 *   {"messages": [{"role", "content"}, ...]}: a turn whose role is not
 *   "assistant" adds "{role}: {content}\n" to the prompt; an assistant turn
 *   adds "assistant: " to the prompt, then its content and an EOS, both
 *   learned. So every assistant turn is learned (EOS ends a turn, as the
 *   generator stops at EOS) and everything else is masked; turns after the
 *   last assistant turn teach nothing and are left out; a conversation
 *   without an assistant turn is an error. Prompt pieces and answers are
 *   encoded separately (a generator encodes the prompt on its own, then the
 *   model continues) with special tokens recognised, so templates may use
 *   the tokenizer's own markers (as HF chat templates do).
 *   A window is the example's first T+1 tokens: ids = w[0..T-1] padded with
 *   EOS, labels = w[1..T] with -100 where the token is prompt or padding.
 *   An example whose prompt fills all T+1 tokens has nothing to learn and
 *   is dropped (counted in data_info.dropped).
 *
 * Train/validation split
 * Document (example) d goes to validation when data_split_point(d) <
 * val_fraction: a fixed hash of its index, independent of the seed. When
 * val_fraction > 0 and that leaves either side without a whole window, the
 * fewest documents nearest the threshold change side; text with too few
 * documents for that (one book in one file) splits the windows of the joined
 * stream by the same hash of the window index instead (split_by_window).
 * Either way no window is in both sides. A corpus of a single window (or a
 * single example) with val_fraction > 0 is an error that says so.
 *
 * Cache
 * One file at cache_path, written through atomic_file and memory-mapped:
 * a header, a fingerprint text (format version, spec fields, a hash of the
 * tokenizer, every file's real path, size and mtime in nanoseconds), then
 * per side the token arrays of the layout in data_internal.h, each 64-byte
 * aligned. The fingerprint is compared byte for byte; any difference, or a
 * file whose sizes do not add up, is rebuilt. The tokenizer API offers no
 * hash of its merges, so the tokenizer is fingerprinted by decoding every id
 * and encoding a probe string: a different vocabulary, or merges that change
 * how the probe encodes, give a different fingerprint.
 *
 * Batches
 * Sample i = step * global_batch + micro * micro_batch + b is training
 * window perm(seed, i / n)(i mod n), perm a keyed Feistel network on the
 * next power of two (at least 4) with cycle-walking: a bijection computed
 * in O(1) from nothing but its arguments, so any node rebuilds any batch
 * and a resumed run sees exactly what an uninterrupted one would. */
/* realpath() is XSI, beyond the build's _POSIX_C_SOURCE. */
#define _XOPEN_SOURCE 700
#include "data_internal.h"
#include "model_util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define CACHE_VERSION 1
#define FEISTEL_ROUNDS 6

/* ---- growable arrays ------------------------------------------------------- */

int data_i32s_push(data_i32s *v, const int32_t *src, size_t n)
{
    if (model_grow((void **)&v->p, sizeof *v->p, v->n + n, &v->cap)) return -1;
    if (n) memcpy(v->p + v->n, src, n * sizeof *src);
    v->n += n;
    return 0;
}

int data_i64s_push(data_i64s *v, int64_t x)
{
    if (model_grow((void **)&v->p, sizeof *v->p, v->n + 1, &v->cap)) return -1;
    v->p[v->n++] = x;
    return 0;
}

int data_chars_push(data_chars *v, const char *src, size_t n)
{
    if (model_grow((void **)&v->p, 1, v->n + n + 1, &v->cap)) return -1;
    if (n) memcpy(v->p + v->n, src, n);
    v->n += n;
    v->p[v->n] = '\0';
    return 0;
}

/* ---- hashing and the permutation ------------------------------------------- */

/* splitmix64's finaliser: every input bit affects every output bit. */
static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double data_split_point(uint64_t index)
{
    return (double)(mix64(index ^ 0x5eed5b1175ull) >> 11) * 0x1p-53;
}

uint64_t data_permute(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t x)
{
    if (n <= 1) return 0;
    /* At least 2 bits, so both halves of the Feistel network have one. */
    int k = 2;
    while (k < 63 && (1ull << k) < n) k++;
    const int a = k / 2, b = k - a;
    const uint64_t ma = (1ull << a) - 1, mb = (1ull << b) - 1;
    uint64_t key[FEISTEL_ROUNDS];
    uint64_t base = mix64(seed ^ mix64(epoch ^ 0xe90c4ull));
    for (int r = 0; r < FEISTEL_ROUNDS; r++) key[r] = mix64(base + (uint64_t)r);
    /* Each round is invertible ((hi, lo) -> (lo, hi ^ F(lo)) on k bits, the
     * halves a and b bits wide); a value past n walks on along its cycle,
     * which returns below n since x itself is. */
    do {
        for (int r = 0; r < FEISTEL_ROUNDS; r++) {
            uint64_t lo = x & mb, hi = x >> b;
            hi ^= mix64(key[r] ^ lo) & ma;
            x = (lo << a) | hi;
        }
    } while (x >= n);
    return x;
}

/* ---- fingerprint ------------------------------------------------------------ */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t tokenizer_hash(const tokenizer *t)
{
    static const char probe[] =
        "The quick brown fox jumps over 13 lazy dogs; don't it's   spaces\n\n\tx = f(y) * 2;"
        " // caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82 ABCabc 123456789"
        " <|endoftext|><|end_of_text|></s> \xff\xfe\r\n";
    char e[256];
    int32_t V = tokenizer_vocab_size(t), eos = tokenizer_eos_id(t);
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, &V, sizeof V);
    h = fnv(h, &eos, sizeof eos);
    for (int32_t id = 0; id < V; id++) {
        char *text = NULL;
        size_t len = 0;
        if (tokenizer_decode(t, &id, 1, &text, &len, e, sizeof e) != 0) len = SIZE_MAX;
        h = fnv(h, &len, sizeof len);
        if (text && len != SIZE_MAX) h = fnv(h, text, len);
        free(text);
    }
    for (int special = 0; special < 2; special++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (tokenizer_encode(t, probe, sizeof probe - 1, special, &ids, &n, e, sizeof e) != 0)
            n = SIZE_MAX;
        h = fnv(h, &n, sizeof n);
        if (ids && n != SIZE_MAX) h = fnv(h, ids, n * sizeof *ids);
        free(ids);
    }
    return h;
}

static int put(data_chars *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int put(data_chars *s, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= sizeof buf ? -1 : data_chars_push(s, buf, (size_t)n);
}

/* Strings go in as hex so no path or separator can forge a field. */
static int put_hex(data_chars *s, const char *label, const char *str)
{
    int rc = put(s, "%s ", label);
    for (const char *p = str; p && *p && !rc; p++) rc = put(s, "%02x", (unsigned char)*p);
    return rc || put(s, str ? "\n" : "(none)\n");
}

static int fingerprint(data_chars *fp, const data_spec *sp, const tokenizer *tok, char *err,
                       size_t errlen)
{
    int rc = put(fp, "shardnode data cache %d\nformat %s\nseq_len %d\nval_fraction %.17g\n",
                 CACHE_VERSION, sp->format == DATA_JSONL ? "jsonl" : "text", sp->seq_len,
                 sp->val_fraction);
    const char *sep = sp->separator && *sp->separator ? sp->separator : NULL;
    rc = rc || put_hex(fp, "separator", sp->format == DATA_TEXT ? sep : NULL);
    rc = rc || put_hex(fp, "template", sp->format == DATA_JSONL ? sp->prompt_template : NULL);
    rc = rc || put(fp, "tokenizer %d %016llx\n", tokenizer_vocab_size(tok),
                   (unsigned long long)tokenizer_hash(tok));
    for (int f = 0; f < sp->nfiles && !rc; f++) {
        struct stat st;
        char *real = realpath(sp->files[f], NULL);
        if (!real || stat(real, &st) != 0) {
            snprintf(err, errlen, "%s: cannot open: %s", sp->files[f], strerror(errno));
            free(real);
            return -1;
        }
        if (!S_ISREG(st.st_mode)) {
            snprintf(err, errlen, "%s: not a regular file", sp->files[f]);
            free(real);
            return -1;
        }
        rc = put_hex(fp, "file", real) ||
             put(fp, "size %lld mtime %lld.%09ld\n", (long long)st.st_size,
                 (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
        free(real);
    }
    if (rc) snprintf(err, errlen, "%s: out of memory", sp->files[0]);
    return rc ? -1 : 0;
}

/* ---- cache file ------------------------------------------------------------- */

typedef struct {
    char magic[8];
    uint32_t version, byte_order;
    uint64_t fp_len;
    int64_t T, format;
    int64_t documents, corpus_tokens, truncated, dropped, split_by_window;
    int64_t n[2], ntok[2];   /* train, val: windows/examples, tokens */
    uint64_t file_size;
} cache_header;

static const char cache_magic[8] = {'S', 'N', 'D', 'A', 'T', 'A', '\r', '\n'};

typedef struct {
    uint64_t tok[2], lab[2], off[2], end;
} cache_layout;

static uint64_t align64(uint64_t x) { return (x + 63) & ~(uint64_t)63; }

/* Offsets of the arrays; -1 when the counts cannot be those of a file of
 * `limit` bytes (a damaged header must not make us read past the map). */
static int layout_of(const cache_header *h, cache_layout *l, uint64_t limit)
{
    uint64_t pos = align64(sizeof *h + h->fp_len);
    for (int s = 0; s < 2; s++) {
        if (h->n[s] < 0 || h->ntok[s] < 0 || (uint64_t)h->n[s] > limit ||
            (uint64_t)h->ntok[s] > limit)
            return -1;
        l->tok[s] = pos;
        pos = align64(pos + 4 * (uint64_t)h->ntok[s]);
        if (h->format == DATA_JSONL) {
            l->lab[s] = pos;
            pos = align64(pos + 4 * (uint64_t)h->ntok[s]);
            l->off[s] = pos;
            pos = align64(pos + 8 * ((uint64_t)h->n[s] + 1));
        }
    }
    l->end = pos;
    return 0;
}

static void write_padded(atomic_file *f, const void *p, size_t len, uint64_t *pos)
{
    static const char zeros[64];
    if (len) atomic_file_write(f, p, len);
    *pos += len;
    atomic_file_write(f, zeros, align64(*pos) - *pos);
    *pos = align64(*pos);
}

static int cache_write(atomic_file *f, const data_built *b, const data_spec *sp,
                       const data_chars *fp, char *err, size_t errlen)
{
    const data_side *side[2] = {&b->train, &b->val};
    cache_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, cache_magic, sizeof h.magic);
    h.version = CACHE_VERSION;
    h.byte_order = 0x01020304;
    h.fp_len = fp->n;
    h.T = sp->seq_len;
    h.format = sp->format;
    h.documents = b->info.documents;
    h.corpus_tokens = b->info.corpus_tokens;
    h.truncated = b->info.truncated;
    h.dropped = b->info.dropped;
    h.split_by_window = b->info.split_by_window;
    for (int s = 0; s < 2; s++) {
        h.n[s] = side[s]->n;
        h.ntok[s] = (int64_t)side[s]->tok.n;
    }
    cache_layout l;
    layout_of(&h, &l, UINT64_MAX);
    h.file_size = l.end;
    uint64_t pos = 0;
    atomic_file_write(f, &h, sizeof h);
    pos = sizeof h;
    write_padded(f, fp->p, fp->n, &pos);
    for (int s = 0; s < 2; s++) {
        write_padded(f, side[s]->tok.p, 4 * side[s]->tok.n, &pos);
        if (sp->format != DATA_JSONL) continue;
        static const int64_t zero = 0;
        write_padded(f, side[s]->lab.p, 4 * side[s]->lab.n, &pos);
        write_padded(f, side[s]->n ? side[s]->off.p : &zero, 8 * ((size_t)side[s]->n + 1), &pos);
    }
    return atomic_file_commit(f, err, errlen);
}

struct data_set {
    int T;
    data_format format;
    int32_t eos;
    int32_t vocab;     /* the tokenizer's: ids in the cache are below it */
    data_info info;
    void *map;
    size_t maplen;
    struct {
        int64_t n;
        const int32_t *tok, *lab;
        const int64_t *off;
    } side[2];
};

/* Maps cache_path if it holds exactly this fingerprint and adds up; 0 if
 * it did, -1 if it must be (re)built. */
/* Every id in [0, vocab), every label -100 or an id: a cache damaged on
 * disk is rebuilt, never trained on. */
static bool ids_valid(const int32_t *p, int64_t n, int32_t vocab, bool labels)
{
    for (int64_t i = 0; i < n; i++)
        if ((p[i] < 0 || p[i] >= vocab) && !(labels && p[i] == -100)) return false;
    return true;
}

static int cache_map(data_set *d, const char *path, const data_chars *fp)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < sizeof(cache_header)) {
        close(fd);
        return -1;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return -1;
    const unsigned char *base = map;
    cache_header h;
    cache_layout l;
    memcpy(&h, base, sizeof h);
    uint64_t size = (uint64_t)st.st_size;
    bool ok = memcmp(h.magic, cache_magic, sizeof h.magic) == 0 && h.version == CACHE_VERSION &&
              h.byte_order == 0x01020304 && h.fp_len == fp->n && h.file_size == size &&
              sizeof h + h.fp_len <= size && memcmp(base + sizeof h, fp->p, fp->n) == 0 &&
              h.T == d->T && h.format == (int64_t)d->format && layout_of(&h, &l, size) == 0 &&
              l.end == size && h.n[0] > 0;
    for (int s = 0; ok && s < 2; s++) {
        d->side[s].n = h.n[s];
        d->side[s].tok = (const int32_t *)(base + l.tok[s]);
        ok = ids_valid(d->side[s].tok, h.ntok[s], d->vocab, false);
        if (d->format != DATA_JSONL) {
            ok = ok && h.ntok[s] % (d->T + 1) == 0 && h.ntok[s] / (d->T + 1) == h.n[s];
            continue;
        }
        /* Offsets drive the memcpy of every batch: check them all. */
        const int64_t *off = (const int64_t *)(base + l.off[s]);
        d->side[s].lab = (const int32_t *)(base + l.lab[s]);
        d->side[s].off = off;
        ok = ok && ids_valid(d->side[s].lab, h.ntok[s], d->vocab, true);
        ok = ok && off[0] == 0 && off[h.n[s]] == h.ntok[s];
        for (int64_t e = 0; ok && e < h.n[s]; e++)
            ok = off[e + 1] > off[e] && off[e + 1] <= off[e] + d->T;
    }
    if (!ok) {
        munmap(map, (size_t)st.st_size);
        return -1;
    }
    d->map = map;
    d->maplen = (size_t)st.st_size;
    d->info = (data_info){h.documents, h.corpus_tokens, h.n[0], h.n[1], h.truncated,
                          h.dropped, h.split_by_window != 0, true};
    return 0;
}

/* ---- opening ---------------------------------------------------------------- */

static int check_spec(const data_spec *sp, const tokenizer *tok, const char *cache_path,
                      char *err, size_t errlen)
{
    if (!sp->files || sp->nfiles < 1) {
        snprintf(err, errlen, "data: no corpus files given");
        return -1;
    }
    for (int f = 0; f < sp->nfiles; f++) {
        if (!sp->files[f] || !*sp->files[f]) {
            snprintf(err, errlen, "data: corpus file %d has an empty name", f + 1);
            return -1;
        }
    }
    if (sp->format != DATA_TEXT && sp->format != DATA_JSONL) {
        snprintf(err, errlen, "%s: unknown data format %d", sp->files[0], (int)sp->format);
        return -1;
    }
    if (sp->seq_len < 1 || sp->seq_len > INT_MAX / 2) {
        snprintf(err, errlen, "%s: seq_len %d is out of range", sp->files[0], sp->seq_len);
        return -1;
    }
    if (!(sp->val_fraction >= 0 && sp->val_fraction < 1)) {
        snprintf(err, errlen, "%s: val_fraction %g must be in [0, 1)", sp->files[0],
                 sp->val_fraction);
        return -1;
    }
    if (tokenizer_eos_id(tok) < 0) {
        snprintf(err, errlen, "%s: the tokenizer has no end-of-text token (<|endoftext|>, "
                 "<|end_of_text|> or </s>) to put between documents", sp->files[0]);
        return -1;
    }
    if (!cache_path || !*cache_path) {
        snprintf(err, errlen, "%s: no path given for the token cache", sp->files[0]);
        return -1;
    }
    return 0;
}

int data_open(data_set **out, const data_spec *spec, const tokenizer *tok,
              const char *cache_path, char *err, size_t errlen)
{
    *out = NULL;
    if (check_spec(spec, tok, cache_path, err, errlen) != 0) return -1;
    data_set *d = calloc(1, sizeof *d);
    data_chars fp = {0};
    if (!d) {
        snprintf(err, errlen, "%s: out of memory", cache_path);
        return -1;
    }
    d->T = spec->seq_len;
    d->format = spec->format;
    d->eos = tokenizer_eos_id(tok);
    d->vocab = tokenizer_vocab_size(tok);
    if (fingerprint(&fp, spec, tok, err, errlen) != 0) goto fail;
    if (cache_map(d, cache_path, &fp) == 0) goto done;
    /* Open the cache for writing first, so an unwritable path fails before
     * minutes of tokenizing, not after. */
    atomic_file f;
    data_built b;
    if (atomic_file_begin(&f, cache_path, err, errlen) != 0) {
        snprintf(err, errlen, "%s: cannot create the token cache: %s", cache_path,
                 strerror(errno));
        goto fail;
    }
    if (data_build(&b, spec, tok, d->eos, err, errlen) != 0) {
        atomic_file_abort(&f);
        goto fail;
    }
    int rc = cache_write(&f, &b, spec, &fp, err, errlen);
    data_info info = b.info;
    data_built_free(&b);
    if (rc != 0) goto fail;
    if (cache_map(d, cache_path, &fp) != 0) {
        snprintf(err, errlen, "%s: the token cache just written does not read back", cache_path);
        goto fail;
    }
    d->info = info;
    d->info.from_cache = false;
done:
    free(fp.p);
    *out = d;
    return 0;
fail:
    free(fp.p);
    free(d);
    return -1;
}

void data_close(data_set *d)
{
    if (!d) return;
    if (d->map) munmap(d->map, d->maplen);
    free(d);
}

const data_info *data_get_info(const data_set *d) { return &d->info; }
int64_t data_train_samples(const data_set *d) { return d->side[0].n; }
int64_t data_val_samples(const data_set *d) { return d->side[1].n; }

int64_t data_train_tokens(const data_set *d)
{
    if (d->format != DATA_JSONL) return d->side[0].n * d->T;
    return d->side[0].n ? d->side[0].off[d->side[0].n] : 0;
}

/* ---- batches ---------------------------------------------------------------- */

static void fill_row(const data_set *d, int s, int64_t w, int32_t *ids, int32_t *labels)
{
    const size_t T = (size_t)d->T;
    if (d->format != DATA_JSONL) {
        const int32_t *p = d->side[s].tok + (size_t)w * (T + 1);
        memcpy(ids, p, T * sizeof *ids);
        memcpy(labels, p + 1, T * sizeof *labels);
        return;
    }
    size_t o = (size_t)d->side[s].off[w], n = (size_t)d->side[s].off[w + 1] - o;
    memcpy(ids, d->side[s].tok + o, n * sizeof *ids);
    memcpy(labels, d->side[s].lab + o, n * sizeof *labels);
    for (size_t j = n; j < T; j++) {
        ids[j] = d->eos;
        labels[j] = DATA_IGNORE;
    }
}

int64_t data_train_window(const data_set *d, uint64_t seed, int64_t sample)
{
    uint64_t n = (uint64_t)d->side[0].n, i = (uint64_t)sample;
    return (int64_t)data_permute(n, seed, i / n, i % n);
}

void data_train_batch(const data_set *d, uint64_t seed, int64_t step, int micro,
                      int micro_batch, int global_batch, int32_t *ids, int32_t *labels)
{
    int64_t first = step * global_batch + (int64_t)micro * micro_batch;
    for (int b = 0; b < micro_batch; b++) {
        int64_t w = data_train_window(d, seed, first + b);
        fill_row(d, 0, w, ids + (size_t)b * d->T, labels + (size_t)b * d->T);
    }
}

void data_val_batch(const data_set *d, int64_t first, int rows, int32_t *ids, int32_t *labels)
{
    const int64_t n = d->side[1].n;
    for (int r = 0; r < rows; r++) {
        int32_t *ri = ids + (size_t)r * d->T, *rl = labels + (size_t)r * d->T;
        if (n == 0) {
            for (int j = 0; j < d->T; j++) {
                ri[j] = d->eos;
                rl[j] = DATA_IGNORE;
            }
            continue;
        }
        int64_t w = (first + r) % n;
        fill_row(d, 1, w < 0 ? w + n : w, ri, rl);
    }
}

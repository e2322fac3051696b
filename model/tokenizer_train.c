/* tokenizer_train.c — learns byte-level BPE merges.
 *
 * Standard BPE training on pre-tokenized chunks ("words"): count every
 * distinct chunk once with its frequency, count adjacent pairs of symbols
 * (every position, so "aaa" holds (a,a) twice), then repeatedly merge the
 * most frequent pair. Each word is merged left to right without overlap.
 * Ties go to the pair whose (left bytes, right bytes) is smallest, compared
 * as byte strings, so the result depends only on the corpus, never on ids or
 * hash order.
 *
 * Speed comes from updating counts incrementally: each pair keeps the list
 * of words it occurs in, a merge visits only those words and adjusts the
 * counts of the pairs around each merged occurrence, and a max-heap holds
 * (count, pair) entries that are checked against the live count when popped
 * (counts of old pairs only fall; a pair whose count rises is pushed again). */
#include "model_util.h"
#include "tokenizer_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *text;   /* into the caller's texts, until symbols are made */
    uint32_t len;       /* symbols left (bytes at first) */
    uint64_t hash;
    int64_t freq;
    int32_t *sym;
} word;

typedef struct {
    int32_t a, b;
    int64_t count;
    int32_t *words;     /* words it occurs in; may hold words it has left */
    uint32_t nwords, capwords;
    uint32_t touched;   /* merge number that last raised its count */
} pair;

typedef struct {
    int64_t count;
    int32_t pair;
} heap_entry;

typedef struct {
    tokenizer *t;       /* byte tokens, then merged tokens, grown as merges are learned */
    word *words;
    size_t nwords, capwords;
    int32_t *wslots;    /* chunk -> word, open addressing; -1 empty */
    size_t capwslots;
    pair *pairs;
    size_t npairs, cappairs;
    uint64_t *pkeys;    /* (a, b) -> pair, open addressing; UINT64_MAX empty */
    int32_t *pvals;
    size_t cappkeys;
    heap_entry *heap;
    size_t nheap, capheap;
    int32_t *raised;    /* pairs whose count rose during the current merge */
    size_t nraised, capraised;
} trainer;

/* ---- counting chunks ---------------------------------------------------------- */

static int wslots_grow(trainer *tr)
{
    size_t cap = tr->capwslots ? tr->capwslots * 2 : 4096;
    int32_t *s = malloc(cap * sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; i < cap; i++) s[i] = -1;
    for (size_t i = 0; i < tr->capwslots; i++) {
        int32_t w = tr->wslots[i];
        if (w < 0) continue;
        size_t j = tr->words[w].hash & (cap - 1);
        while (s[j] >= 0) j = (j + 1) & (cap - 1);
        s[j] = w;
    }
    free(tr->wslots);
    tr->wslots = s;
    tr->capwslots = cap;
    return 0;
}

static int count_chunk(void *ctx, const char *chunk, size_t len)
{
    trainer *tr = ctx;
    if (len < 2) return 0; /* no pairs */
    if (len > UINT32_MAX || tr->nwords >= INT32_MAX) return -1;
    if ((tr->nwords + 1) * 2 > tr->capwslots && wslots_grow(tr)) return -1;
    uint64_t h = tok_hash_bytes(chunk, len);
    size_t mask = tr->capwslots - 1, i = h & mask;
    for (; tr->wslots[i] >= 0; i = (i + 1) & mask) {
        word *w = &tr->words[tr->wslots[i]];
        if (w->hash == h && w->len == len && memcmp(w->text, chunk, len) == 0) {
            w->freq++;
            return 0;
        }
    }
    if (model_grow((void **)&tr->words, sizeof *tr->words, tr->nwords + 1, &tr->capwords)) return -1;
    tr->words[tr->nwords] = (word){chunk, (uint32_t)len, h, 1, NULL};
    tr->wslots[i] = (int32_t)tr->nwords++;
    return 0;
}

/* ---- pairs --------------------------------------------------------------------- */

static uint64_t pkey(int32_t a, int32_t b)
{
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

static size_t pslot(uint64_t k, size_t mask)
{
    return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 17) & mask;
}

static int pkeys_grow(trainer *tr)
{
    size_t cap = tr->cappkeys ? tr->cappkeys * 2 : 4096;
    uint64_t *k = malloc(cap * sizeof *k);
    int32_t *v = malloc(cap * sizeof *v);
    if (!k || !v) {
        free(k);
        free(v);
        return -1;
    }
    memset(k, 0xFF, cap * sizeof *k);
    for (size_t i = 0; i < tr->cappkeys; i++) {
        if (tr->pkeys[i] == UINT64_MAX) continue;
        size_t j = pslot(tr->pkeys[i], cap - 1);
        while (k[j] != UINT64_MAX) j = (j + 1) & (cap - 1);
        k[j] = tr->pkeys[i];
        v[j] = tr->pvals[i];
    }
    free(tr->pkeys);
    free(tr->pvals);
    tr->pkeys = k;
    tr->pvals = v;
    tr->cappkeys = cap;
    return 0;
}

/* The pair (a, b), created with count 0 if new; -1 when out of memory. */
static int32_t pair_of(trainer *tr, int32_t a, int32_t b)
{
    if ((tr->npairs + 1) * 2 > tr->cappkeys && pkeys_grow(tr)) return -1;
    uint64_t k = pkey(a, b);
    size_t mask = tr->cappkeys - 1, i = pslot(k, mask);
    for (; tr->pkeys[i] != UINT64_MAX; i = (i + 1) & mask)
        if (tr->pkeys[i] == k) return tr->pvals[i];
    if (tr->npairs >= INT32_MAX ||
        model_grow((void **)&tr->pairs, sizeof *tr->pairs, tr->npairs + 1, &tr->cappairs))
        return -1;
    tr->pairs[tr->npairs] = (pair){a, b, 0, NULL, 0, 0, 0};
    tr->pkeys[i] = k;
    tr->pvals[i] = (int32_t)tr->npairs;
    return (int32_t)tr->npairs++;
}

/* Adds delta occurrences of (a, b) in word w (merge number stamp). */
static int pair_add(trainer *tr, int32_t a, int32_t b, int64_t delta, int32_t w,
                    uint32_t stamp)
{
    int32_t p = pair_of(tr, a, b);
    if (p < 0) return -1;
    pair *pp = &tr->pairs[p];
    pp->count += delta;
    if (delta <= 0) return 0;
    /* a word's pairs are added word by word, so a repeat is the last entry */
    if (!pp->nwords || pp->words[pp->nwords - 1] != w) {
        size_t cap = pp->capwords;
        if (model_grow((void **)&pp->words, sizeof *pp->words, (size_t)pp->nwords + 1, &cap))
            return -1;
        pp->capwords = (uint32_t)cap;
        pp->words[pp->nwords++] = w;
    }
    if (pp->touched != stamp) {
        pp->touched = stamp;
        if (model_grow((void **)&tr->raised, sizeof *tr->raised, tr->nraised + 1, &tr->capraised))
            return -1;
        tr->raised[tr->nraised++] = p;
    }
    return 0;
}

/* ---- the heap: most frequent first, then smallest (left, right) bytes -------- */

static int bytes_cmp(const tokenizer *t, int32_t x, int32_t y)
{
    uint32_t lx = t->len[x], ly = t->len[y];
    int c = memcmp(t->bytes + t->off[x], t->bytes + t->off[y], lx < ly ? lx : ly);
    return c ? c : (lx > ly) - (lx < ly);
}

static bool before(const trainer *tr, heap_entry x, heap_entry y)
{
    if (x.count != y.count) return x.count > y.count;
    const pair *px = &tr->pairs[x.pair], *py = &tr->pairs[y.pair];
    int c = bytes_cmp(tr->t, px->a, py->a);
    if (c) return c < 0;
    return bytes_cmp(tr->t, px->b, py->b) < 0;
}

static int heap_push(trainer *tr, int32_t p)
{
    if (model_grow((void **)&tr->heap, sizeof *tr->heap, tr->nheap + 1, &tr->capheap)) return -1;
    heap_entry e = {tr->pairs[p].count, p};
    size_t i = tr->nheap++;
    while (i > 0 && before(tr, e, tr->heap[(i - 1) / 2])) {
        tr->heap[i] = tr->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    tr->heap[i] = e;
    return 0;
}

static heap_entry heap_pop(trainer *tr)
{
    heap_entry top = tr->heap[0], last = tr->heap[--tr->nheap];
    size_t i = 0, n = tr->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && before(tr, tr->heap[c + 1], tr->heap[c])) c++;
        if (!before(tr, tr->heap[c], last)) break;
        tr->heap[i] = tr->heap[c];
        i = c;
    }
    if (n) tr->heap[i] = last;
    return top;
}

/* ---- merging ---------------------------------------------------------------------- */

/* Replaces (a, b) by c in word w, left to right, and moves the counts of
 * the neighbouring pairs. The left neighbour is read from the merged
 * output, so "a b a b" -> "c c" counts (c, c) once and (c, a) not at all. */
static int merge_word(trainer *tr, int32_t wi, int32_t a, int32_t b, int32_t c,
                      uint32_t stamp)
{
    word *w = &tr->words[wi];
    int32_t *s = w->sym;
    uint32_t n = w->len, o = 0;
    int64_t f = w->freq;
    for (uint32_t i = 0; i < n;) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
            if (o > 0 && (pair_add(tr, s[o - 1], a, -f, wi, stamp) ||
                          pair_add(tr, s[o - 1], c, f, wi, stamp)))
                return -1;
            if (i + 2 < n && (pair_add(tr, b, s[i + 2], -f, wi, stamp) ||
                              pair_add(tr, c, s[i + 2], f, wi, stamp)))
                return -1;
            s[o++] = c;
            i += 2;
        } else {
            s[o++] = s[i++];
        }
    }
    w->len = o;
    return 0;
}

static int learn_merge(trainer *tr, int32_t p, uint32_t stamp, int32_t *merged)
{
    tokenizer *t = tr->t;
    int32_t a = tr->pairs[p].a, b = tr->pairs[p].b;
    size_t la = t->len[a], lb = t->len[b];
    char *buf = malloc(la + lb);
    if (!buf) return -1;
    memcpy(buf, t->bytes + t->off[a], la);
    memcpy(buf + la, t->bytes + t->off[b], lb);
    /* The same string may be reached by another path ("a"+"bc" after
     * "ab"+"c"): it keeps its id and the vocabulary does not grow. */
    int32_t c = tok_lookup(t, buf, la + lb);
    int rc = 0;
    if (c < 0) {
        c = t->ntok;
        rc = tok_set_token(t, c, buf, la + lb, TOK_MODEL) || tok_index_token(t, c);
    }
    free(buf);
    if (rc || tok_add_merge(t, a, b, "", NULL, 0)) return -1;
    *merged = c;
    /* the list is detached: merging never adds words to (a, b) itself */
    int32_t *list = tr->pairs[p].words;
    uint32_t nlist = tr->pairs[p].nwords;
    tr->pairs[p].words = NULL;
    tr->pairs[p].nwords = tr->pairs[p].capwords = 0;
    tr->nraised = 0;
    for (uint32_t k = 0; k < nlist && rc == 0; k++) rc = merge_word(tr, list[k], a, b, c, stamp);
    free(list);
    if (rc) return -1;
    tr->pairs[p].count = 0; /* every occurrence is gone; no entry for it stays valid */
    for (size_t k = 0; k < tr->nraised; k++)
        if (tr->pairs[tr->raised[k]].count > 0 && heap_push(tr, tr->raised[k])) return -1;
    return 0;
}

/* ---- the whole run ------------------------------------------------------------------ */

static int check_specials(const char *const *specials, int nspecials, char *err,
                          size_t errlen)
{
    for (int k = 0; k < nspecials; k++) {
        const unsigned char *s = (const unsigned char *)specials[k];
        size_t n = strlen(specials[k]);
        if (n == 0) {
            model_errf(err, errlen, "training: special token %d is empty", k);
            return -1;
        }
        /* tokenizer.json holds it as a JSON string */
        for (size_t i = 0, m; i < n; i += m)
            if (!(m = tok_utf8_valid(s + i, n - i, NULL))) {
                model_errf(err, errlen, "training: special token \"%s\" is not valid UTF-8",
                        specials[k]);
                return -1;
            }
        for (int j = 0; j < k; j++)
            if (strcmp(specials[j], specials[k]) == 0) {
                model_errf(err, errlen, "training: special token \"%s\" is given twice",
                        specials[k]);
                return -1;
            }
    }
    return 0;
}

/* Special tokens written in the corpus are cut out first, so no merge
 * learns a piece of "<|endoftext|>". */
static int count_texts(trainer *tr, const char *const *texts, const size_t *lens, int ntexts,
                       const char *const *specials, int nspecials, char *err, size_t errlen)
{
    size_t *slens = malloc(((size_t)nspecials + 1) * sizeof *slens);
    tok_splitter *sp = tok_splitter_new(tr->t);
    int rc = -1;
    if (!slens || !sp) {
        model_errf(err, errlen, "training: out of memory");
        goto done;
    }
    for (int k = 0; k < nspecials; k++) slens[k] = strlen(specials[k]);
    tok_matchset ms;
    tok_matchset_init(&ms, specials, slens, nspecials);
    for (int i = 0; i < ntexts; i++) {
        const char *text = texts[i];
        size_t len = lens[i];
        for (size_t pos = 0; pos <= len;) {
            size_t at = 0;
            int k = nspecials ? tok_matchset_find(&ms, text + pos, len - pos, &at) : -1;
            size_t end = k >= 0 ? pos + at : len;
            if (tok_split(sp, text + pos, end - pos, count_chunk, tr, err, errlen)) goto done;
            if (k < 0) break;
            pos = end + slens[k];
        }
    }
    rc = 0;
done:
    free(slens);
    tok_splitter_free(sp);
    return rc;
}

static int count_pairs(trainer *tr, int32_t **pool)
{
    size_t total = 0;
    for (size_t w = 0; w < tr->nwords; w++) total += tr->words[w].len;
    if (!(*pool = malloc((total ? total : 1) * sizeof **pool))) return -1;
    size_t off = 0;
    for (size_t w = 0; w < tr->nwords; w++) {
        word *wd = &tr->words[w];
        wd->sym = *pool + off;
        off += wd->len;
        for (uint32_t i = 0; i < wd->len; i++) wd->sym[i] = (unsigned char)wd->text[i];
        wd->text = NULL;
        for (uint32_t i = 0; i + 1 < wd->len; i++)
            if (pair_add(tr, wd->sym[i], wd->sym[i + 1], wd->freq, (int32_t)w, 0)) return -1;
    }
    for (size_t p = 0; p < tr->npairs; p++)
        if (tr->pairs[p].count > 0 && heap_push(tr, (int32_t)p)) return -1;
    return 0;
}

int tokenizer_train(tokenizer **out, const char *const *texts, const size_t *lens, int ntexts,
                    int vocab_size, const char *const *specials, int nspecials, char *err,
                    size_t errlen)
{
    trainer tr = {0};
    int32_t *pool = NULL;
    int rc = -1;
    *out = NULL;
    if (nspecials < 0 || ntexts < 0 || check_specials(specials, nspecials, err, errlen))
        return -1;
    if (vocab_size < 256 + nspecials || vocab_size > TOK_MAX_ID) {
        model_errf(err, errlen, "training: vocabulary size %d must be in [%d, %d] (256 byte "
                "tokens and %d special)", vocab_size, 256 + nspecials, TOK_MAX_ID, nspecials);
        return -1;
    }
    if (!(tr.t = tok_new())) goto oom;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        if (tok_set_token(tr.t, b, &c, 1, TOK_MODEL)) goto oom;
    }
    if (tok_index_vocab(tr.t, "tokenizer", err, errlen) ||
        tok_set_pretokenizer(tr.t, TOK_PRE_BYTELEVEL, TOK_GPT2_PATTERN, false, false,
                             "tokenizer", err, errlen) ||
        count_texts(&tr, texts, lens, ntexts, specials, nspecials, err, errlen))
        goto done;
    if (count_pairs(&tr, &pool)) goto oom;

    int32_t target = vocab_size - nspecials;
    uint32_t stamp = 0;
    while (tr.t->ntok < target && tr.nheap) {
        heap_entry e = heap_pop(&tr);
        int64_t live = tr.pairs[e.pair].count;
        if (e.count != live) { /* stale: its count fell since it was pushed */
            if (live > 0 && heap_push(&tr, e.pair)) goto oom;
            continue;
        }
        int32_t merged;
        if (live <= 0) continue;
        if (learn_merge(&tr, e.pair, ++stamp, &merged)) goto oom;
    }
    for (int k = 0; k < nspecials; k++) {
        int32_t id = tr.t->ntok;
        if (tok_set_token(tr.t, id, specials[k], strlen(specials[k]),
                          TOK_ADDED | TOK_SPECIAL | TOK_RAW) ||
            tok_add_added(tr.t, id))
            goto oom;
    }
    *out = tr.t;
    tr.t = NULL;
    rc = 0;
    goto done;
oom:
    model_errf(err, errlen, "training: out of memory");
done:
    tokenizer_free(tr.t);
    for (size_t p = 0; p < tr.npairs; p++) free(tr.pairs[p].words);
    free(tr.pairs);
    free(tr.pkeys);
    free(tr.pvals);
    free(tr.words);
    free(tr.wslots);
    free(tr.heap);
    free(tr.raised);
    free(pool);
    return rc;
}

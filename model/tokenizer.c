/* tokenizer.c — byte-level BPE (GPT-2, Llama 3): the vocabulary, merges,
 * encoding and decoding. tokenizer_split.c pre-tokenizes (split regex,
 * added tokens), tokenizer_json.c reads and writes HF tokenizer.json,
 * tokenizer_train.c learns merges.
 *
 * Encoding follows HF `tokenizers` so that the same tokenizer.json gives the
 * same ids: added tokens are cut out first (leftmost, then longest), each
 * remaining piece is split by the regex, and each chunk is merged by BPE,
 * always applying the pair of lowest rank, leftmost first. HF works on valid
 * UTF-8 only; bytes that are not valid UTF-8 are their own chunks here (each
 * maximal run of them is one chunk, the valid runs around it are split by the
 * regex as separate texts), so every byte string encodes and decodes back. */
#include "model_util.h"
#include "tokenizer_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- bytes, code points, hashing ---------------------------------------- */

/* Printable bytes stand for themselves; the 68 others (controls, space,
 * DEL..NBSP, soft hyphen) get U+0100.. in byte order, as GPT-2 does. */
uint32_t tok_byte_to_cp(unsigned char b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    if (b <= 0x20) return 256u + b;
    if (b <= 0xA0) return 256u + 33u + (b - 0x7Fu);
    return 256u + 67u; /* 0xAD */
}

int tok_cp_to_byte(uint32_t cp)
{
    if (cp < 256) return tok_byte_to_cp((unsigned char)cp) == cp ? (int)cp : -1;
    if (cp < 256 + 33) return (int)(cp - 256);
    if (cp < 256 + 67) return (int)(cp - 256 - 33 + 0x7F);
    if (cp == 256 + 67) return 0xAD;
    return -1;
}

size_t tok_utf8_valid(const unsigned char *s, size_t len, uint32_t *cp)
{
    unsigned c = s[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
        if (cp) *cp = c;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) n = 3;
    else if (c >= 0xF0 && c <= 0xF4) n = 4;
    else return 0;
    if (len < n) return 0;
    /* the second byte's range rules out overlong forms, surrogates and > U+10FFFF */
    if (c == 0xE0) lo = 0xA0;
    else if (c == 0xED) hi = 0x9F;
    else if (c == 0xF0) lo = 0x90;
    else if (c == 0xF4) hi = 0x8F;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (cp) {
        uint32_t v = c & (0x7F >> n);
        for (size_t i = 1; i < n; i++) v = (v << 6) | (s[i] & 0x3F);
        *cp = v;
    }
    return n;
}

size_t tok_utf8_put(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t tok_hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n, w;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, s, n);
    return mix64(h ^ w);
}

/* ---- the vocabulary ------------------------------------------------------ */

tokenizer *tok_new(void)
{
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    t->eos_config = -1;
    return t;
}

void tokenizer_free(tokenizer *t)
{
    if (!t) return;
    free(t->off);
    free(t->len);
    free(t->flags);
    free(t->bytes);
    free(t->vocab.slots);
    free(t->merges);
    free(t->pairs.keys);
    free(t->pairs.rank);
    free(t->pairs.merged);
    free(t->added);
    free(t->pattern);
    pcre2_code_free(t->re);
    free(t);
}

int tok_set_token(tokenizer *t, int32_t id, const char *b, size_t n, uint8_t flags)
{
    if (id < 0 || id >= TOK_MAX_ID || n > UINT32_MAX) return -1;
    if (id >= t->captok) {
        int32_t c = t->captok ? t->captok : 512;
        while (c <= id) c *= 2;
        uint32_t *off = realloc(t->off, (size_t)c * sizeof *off);
        if (off) t->off = off;
        uint32_t *len = realloc(t->len, (size_t)c * sizeof *len);
        if (len) t->len = len;
        uint8_t *fl = realloc(t->flags, (size_t)c);
        if (fl) t->flags = fl;
        if (!off || !len || !fl) return -1;
        memset(t->flags + t->captok, 0, (size_t)(c - t->captok));
        t->captok = c;
    }
    if (t->nbytes + n > UINT32_MAX) return -1;
    size_t cap = t->capbytes;
    if (model_grow((void **)&t->bytes, 1, t->nbytes + n + 1, &cap)) return -1;
    t->capbytes = cap;
    memcpy(t->bytes + t->nbytes, b, n);
    t->off[id] = (uint32_t)t->nbytes;
    t->len[id] = (uint32_t)n;
    t->flags[id] = flags | TOK_PRESENT;
    t->nbytes += n;
    if (id >= t->ntok) t->ntok = id + 1;
    return 0;
}

char *tok_token_string(const tokenizer *t, int32_t id)
{
    const unsigned char *b = (const unsigned char *)t->bytes + t->off[id];
    size_t n = t->len[id];
    char *s = malloc(2 * n + 1), *o = s;
    if (!s) return NULL;
    if (t->flags[id] & TOK_RAW) {
        memcpy(s, b, n);
        s[n] = 0;
        return s;
    }
    for (size_t i = 0; i < n; i++) o += tok_utf8_put(tok_byte_to_cp(b[i]), o);
    *o = 0;
    return s;
}

static bool same_bytes(const tokenizer *t, int32_t id, const char *b, size_t n)
{
    return t->len[id] == n && memcmp(t->bytes + t->off[id], b, n) == 0;
}

int32_t tok_lookup(const tokenizer *t, const char *b, size_t n)
{
    if (!t->vocab.cap) return -1;
    size_t mask = t->vocab.cap - 1;
    for (size_t i = tok_hash_bytes(b, n) & mask;; i = (i + 1) & mask) {
        int32_t id = t->vocab.slots[i];
        if (id < 0) return -1;
        if (same_bytes(t, id, b, n)) return id;
    }
}

/* Bytes already indexed keep their id (the lower one, as tok_index_vocab
 * goes in id order). */
int tok_index_token(tokenizer *t, int32_t id)
{
    tok_idmap *m = &t->vocab;
    if ((m->count + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        while ((m->count + 1) * 2 > cap) cap *= 2;
        int32_t *slots = malloc(cap * sizeof *slots);
        if (!slots) return -1;
        for (size_t i = 0; i < cap; i++) slots[i] = -1;
        for (size_t i = 0; i < m->cap; i++) {
            int32_t old = m->slots[i];
            if (old < 0) continue;
            size_t j = tok_hash_bytes(t->bytes + t->off[old], t->len[old]) & (cap - 1);
            while (slots[j] >= 0) j = (j + 1) & (cap - 1);
            slots[j] = old;
        }
        free(m->slots);
        m->slots = slots;
        m->cap = cap;
    }
    const char *b = t->bytes + t->off[id];
    size_t mask = m->cap - 1;
    size_t i = tok_hash_bytes(b, t->len[id]) & mask;
    for (; m->slots[i] >= 0; i = (i + 1) & mask)
        if (same_bytes(t, m->slots[i], b, t->len[id])) return 0;
    m->slots[i] = id;
    m->count++;
    return 0;
}

int tok_index_vocab(tokenizer *t, const char *src, char *err, size_t errlen)
{
    /* Raw strings are left out: HF compares chunks with vocabulary strings
     * in the byte alphabet, which a raw string never equals. */
    for (int32_t id = 0; id < t->ntok; id++) {
        if ((t->flags[id] & (TOK_MODEL | TOK_RAW)) != TOK_MODEL) continue;
        if (tok_index_token(t, id)) {
            model_errf(err, errlen, "%s: out of memory", src);
            return -1;
        }
    }
    /* A vocabulary may lack some bytes (SmolLM's has no token for 21 control
     * and non-UTF-8 bytes): HF's BPE without byte_fallback or unk_token
     * drops such a byte when encoding, and so do we (tokenizer_missing_bytes
     * says which). A vocabulary with none of them is no byte-level BPE. */
    int present = 0;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = tok_lookup(t, &c, 1);
        present += t->byte_id[b] >= 0;
    }
    if (!present) {
        model_errf(err, errlen, "%s: the vocabulary has no single-byte token: not a "
                "byte-level BPE", src);
        return -1;
    }
    return 0;
}

int tokenizer_missing_bytes(const tokenizer *t, unsigned char *bytes)
{
    int n = 0;
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] < 0) {
            if (bytes) bytes[n] = (unsigned char)b;
            n++;
        }
    return n;
}

/* ---- merges ---------------------------------------------------------------- */

static uint64_t pair_key(int32_t a, int32_t b)
{
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

static const int32_t *pair_find(const tok_pairmap *m, int32_t a, int32_t b, int32_t *merged)
{
    if (!m->cap) return NULL;
    uint64_t k = pair_key(a, b);
    size_t mask = m->cap - 1;
    for (size_t i = mix64(k) & mask;; i = (i + 1) & mask) {
        if (m->keys[i] == k) {
            *merged = m->merged[i];
            return &m->rank[i];
        }
        if (m->keys[i] == UINT64_MAX) return NULL;
    }
}

static int pair_put(tok_pairmap *m, uint64_t k, int32_t rank, int32_t merged)
{
    if ((m->count + 1) * 2 > m->cap) {
        tok_pairmap n = {0};
        n.cap = m->cap ? m->cap * 2 : 1024;
        n.keys = malloc(n.cap * sizeof *n.keys);
        n.rank = malloc(n.cap * sizeof *n.rank);
        n.merged = malloc(n.cap * sizeof *n.merged);
        if (!n.keys || !n.rank || !n.merged) {
            free(n.keys);
            free(n.rank);
            free(n.merged);
            return -1;
        }
        memset(n.keys, 0xFF, n.cap * sizeof *n.keys);
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i] != UINT64_MAX) pair_put(&n, m->keys[i], m->rank[i], m->merged[i]);
        free(m->keys);
        free(m->rank);
        free(m->merged);
        *m = n;
    }
    size_t mask = m->cap - 1;
    size_t i = mix64(k) & mask;
    while (m->keys[i] != UINT64_MAX && m->keys[i] != k) i = (i + 1) & mask;
    if (m->keys[i] == UINT64_MAX) m->count++;
    m->keys[i] = k;
    m->rank[i] = rank;
    m->merged[i] = merged;
    return 0;
}

int tok_add_merge(tokenizer *t, int32_t a, int32_t b, const char *src, char *err,
                  size_t errlen)
{
    size_t la = t->len[a], lb = t->len[b];
    char small[64], *buf = la + lb <= sizeof small ? small : malloc(la + lb);
    if (!buf) goto oom;
    memcpy(buf, t->bytes + t->off[a], la);
    memcpy(buf + la, t->bytes + t->off[b], lb);
    int32_t merged = tok_lookup(t, buf, la + lb);
    if (buf != small) free(buf);
    if (merged < 0) {
        char *sa = tok_token_string(t, a), *sb = tok_token_string(t, b);
        model_errf(err, errlen, "%s: merges[%d] \"%s %s\": the merged token is not in the "
                "vocabulary", src, t->nmerges, sa ? sa : "?", sb ? sb : "?");
        free(sa);
        free(sb);
        return -1;
    }
    size_t cap = (size_t)t->capmerges;
    if (model_grow((void **)&t->merges, 2 * sizeof *t->merges, (size_t)t->nmerges + 1, &cap)) goto oom;
    t->capmerges = (int32_t)cap;
    t->merges[2 * t->nmerges] = a;
    t->merges[2 * t->nmerges + 1] = b;
    if (pair_put(&t->pairs, pair_key(a, b), t->nmerges, merged)) goto oom;
    t->nmerges++;
    return 0;
oom:
    model_errf(err, errlen, "%s: out of memory", src);
    return -1;
}

int tok_add_added(tokenizer *t, int32_t id)
{
    size_t cap = (size_t)t->capadded;
    if (model_grow((void **)&t->added, sizeof *t->added, (size_t)t->nadded + 1, &cap)) return -1;
    t->capadded = (int32_t)cap;
    t->added[t->nadded++] = id;
    return 0;
}

/* ---- encoding -------------------------------------------------------------- */

typedef struct {
    int32_t id;
    int32_t prev, next;   /* neighbours still alive; -1 at the ends */
} bpe_sym;

typedef struct {
    int32_t rank, pos;    /* a candidate merge of the pair starting at symbol pos */
} bpe_cand;

/* One slot of the per-call cache chunk -> ids: the same chunks recur all
 * through a text, so each distinct one is merged once. */
typedef struct {
    uint64_t hash;
    size_t koff, klen;    /* klen 0: empty slot (cached chunks are >= 2 bytes) */
    size_t ioff, icount;
} cache_slot;

typedef struct {
    const tokenizer *t;
    int32_t *ids;
    size_t n, cap;
    cache_slot *slots;
    size_t nslots, used;
    char *keys;
    size_t nkeys, capkeys;
    int32_t *cids;
    size_t ncids, capcids;
    bpe_sym *sym;
    size_t capsym;
    bpe_cand *heap;
    size_t nheap, capheap;
} encoder;

static int push_id(encoder *e, int32_t id)
{
    if (model_grow((void **)&e->ids, sizeof *e->ids, e->n + 1, &e->cap)) return -1;
    e->ids[e->n++] = id;
    return 0;
}

static bool cand_less(bpe_cand a, bpe_cand b)
{
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static int heap_push(encoder *e, int32_t rank, int32_t pos)
{
    if (model_grow((void **)&e->heap, sizeof *e->heap, e->nheap + 1, &e->capheap)) return -1;
    bpe_cand c = {rank, pos};
    size_t i = e->nheap++;
    while (i > 0 && cand_less(c, e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = c;
    return 0;
}

static bpe_cand heap_pop(encoder *e)
{
    bpe_cand top = e->heap[0], last = e->heap[--e->nheap];
    size_t i = 0, n = e->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_less(e->heap[c + 1], e->heap[c])) c++;
        if (!cand_less(e->heap[c], last)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n) e->heap[i] = last;
    return top;
}

static int push_pair(encoder *e, int32_t left)
{
    const bpe_sym *s = e->sym;
    int32_t right = s[left].next, merged;
    if (right < 0) return 0;
    const int32_t *rank = pair_find(&e->t->pairs, s[left].id, s[right].id, &merged);
    return rank ? heap_push(e, *rank, left) : 0;
}

/* Merges one chunk as HF does: a heap of candidate pairs ordered by (rank,
 * position); a popped candidate whose pair has changed since it was pushed
 * is stale and skipped. Appends the ids to e->ids. */
static int bpe_chunk(encoder *e, const char *chunk, size_t len)
{
    const tokenizer *t = e->t;
    if (len > INT32_MAX) return -1;
    if (model_grow((void **)&e->sym, sizeof *e->sym, len, &e->capsym)) return -1;
    bpe_sym *s = e->sym;
    int32_t n = 0;
    for (size_t k = 0; k < len; k++) {
        /* A byte without a token is left out, as HF does: its neighbours
         * become adjacent and may merge. */
        int32_t id = t->byte_id[(unsigned char)chunk[k]];
        if (id < 0) continue;
        s[n].id = id;
        s[n].prev = n - 1;
        s[n].next = -1;
        if (n > 0) s[n - 1].next = n;
        n++;
    }
    if (n == 0) return 0;
    e->nheap = 0;
    for (int32_t i = 0; i + 1 < n; i++)
        if (push_pair(e, i)) return -1;
    while (e->nheap) {
        bpe_cand c = heap_pop(e);
        int32_t i = c.pos, j = s[i].next, merged;
        if (s[i].id < 0 || j < 0) continue;
        const int32_t *rank = pair_find(&t->pairs, s[i].id, s[j].id, &merged);
        if (!rank || *rank != c.rank) continue;
        s[i].id = merged;
        s[j].id = -1;
        s[i].next = s[j].next;
        if (s[i].next >= 0) s[s[i].next].prev = i;
        if (s[i].prev >= 0 && push_pair(e, s[i].prev)) return -1;
        if (push_pair(e, i)) return -1;
    }
    for (int32_t i = 0; i >= 0; i = s[i].next)
        if (push_id(e, s[i].id)) return -1;
    return 0;
}

static int cache_grow(encoder *e)
{
    size_t cap = e->nslots ? e->nslots * 2 : 1024;
    cache_slot *slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    for (size_t i = 0; i < e->nslots; i++) {
        if (!e->slots[i].klen) continue;
        size_t j = e->slots[i].hash & (cap - 1);
        while (slots[j].klen) j = (j + 1) & (cap - 1);
        slots[j] = e->slots[i];
    }
    free(e->slots);
    e->slots = slots;
    e->nslots = cap;
    return 0;
}

static int encode_chunk(void *ctx, const char *chunk, size_t len)
{
    encoder *e = ctx;
    const tokenizer *t = e->t;
    if (len == 1) {
        int32_t id = t->byte_id[(unsigned char)chunk[0]];
        return id >= 0 ? push_id(e, id) : 0;
    }
    if ((e->used + 1) * 2 > e->nslots && cache_grow(e)) return -1;
    uint64_t h = tok_hash_bytes(chunk, len);
    size_t mask = e->nslots - 1, i = h & mask;
    for (; e->slots[i].klen; i = (i + 1) & mask) {
        cache_slot *c = &e->slots[i];
        if (c->hash != h || c->klen != len || memcmp(e->keys + c->koff, chunk, len)) continue;
        if (model_grow((void **)&e->ids, sizeof *e->ids, e->n + c->icount, &e->cap)) return -1;
        memcpy(e->ids + e->n, e->cids + c->ioff, c->icount * sizeof *e->ids);
        e->n += c->icount;
        return 0;
    }
    size_t first = e->n;
    int32_t whole = t->ignore_merges ? tok_lookup(t, chunk, len) : -1;
    if (whole >= 0 ? push_id(e, whole) : bpe_chunk(e, chunk, len)) return -1;
    size_t count = e->n - first;
    if (model_grow((void **)&e->keys, 1, e->nkeys + len, &e->capkeys) ||
        model_grow((void **)&e->cids, sizeof *e->cids, e->ncids + count, &e->capcids))
        return -1;
    memcpy(e->keys + e->nkeys, chunk, len);
    memcpy(e->cids + e->ncids, e->ids + first, count * sizeof *e->ids);
    e->slots[i] = (cache_slot){h, e->nkeys, len, e->ncids, count};
    e->nkeys += len;
    e->ncids += count;
    e->used++;
    return 0;
}

int tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool allow_special,
                     int32_t **ids, size_t *n, char *err, size_t errlen)
{
    encoder e = {.t = t};
    tok_splitter *sp = tok_splitter_new(t);
    const char **strs = malloc(((size_t)t->nadded + 1) * sizeof *strs);
    size_t *lens = malloc(((size_t)t->nadded + 1) * sizeof *lens);
    int32_t *aids = malloc(((size_t)t->nadded + 1) * sizeof *aids);
    int rc = -1, nactive = 0;
    *ids = NULL;
    *n = 0;
    if (!text) text = ""; /* (NULL, 0) is an empty text; NULL + 0 is not defined C */
    if (!sp || !strs || !lens || !aids) {
        model_errf(err, errlen, "out of memory");
        goto done;
    }
    /* HF always cuts out added tokens that are not special; special ones
     * only when the caller asks. */
    for (int32_t k = 0; k < t->nadded; k++) {
        int32_t id = t->added[k];
        if ((t->flags[id] & TOK_SPECIAL) && !allow_special) continue;
        strs[nactive] = t->bytes + t->off[id];
        lens[nactive] = t->len[id];
        aids[nactive++] = id;
    }
    tok_matchset ms;
    tok_matchset_init(&ms, strs, lens, nactive);
    for (size_t pos = 0; pos <= len;) {
        size_t at = 0;
        int k = nactive ? tok_matchset_find(&ms, text + pos, len - pos, &at) : -1;
        size_t end = k >= 0 ? pos + at : len;
        if (tok_split(sp, text + pos, end - pos, encode_chunk, &e, err, errlen)) goto done;
        if (k < 0) break;
        if (push_id(&e, aids[k])) {
            model_errf(err, errlen, "out of memory");
            goto done;
        }
        pos = end + lens[k];
    }
    *ids = e.ids;
    *n = e.n;
    e.ids = NULL;
    rc = 0;
done:
    free(e.ids);
    free(e.slots);
    free(e.keys);
    free(e.cids);
    free(e.sym);
    free(e.heap);
    free(strs);
    free(lens);
    free(aids);
    tok_splitter_free(sp);
    return rc;
}

/* ---- decoding and queries ---------------------------------------------------- */

int tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, char **text,
                     size_t *len, char *err, size_t errlen)
{
    size_t total = 0;
    *text = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->ntok || !(t->flags[id] & TOK_PRESENT)) {
            model_errf(err, errlen, "id %ld at position %zu is not in the vocabulary (ids 0..%d)",
                    (long)id, i, t->ntok - 1);
            return -1;
        }
        total += t->len[id];
    }
    char *out = malloc(total + 1), *o = out;
    if (!out) {
        model_errf(err, errlen, "out of memory for %zu bytes", total);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        memcpy(o, t->bytes + t->off[ids[i]], t->len[ids[i]]);
        o += t->len[ids[i]];
    }
    *o = 0;
    *text = out;
    *len = total;
    return 0;
}

int tokenizer_vocab_size(const tokenizer *t)
{
    return t->ntok;
}

int32_t tokenizer_special_id(const tokenizer *t, const char *name)
{
    size_t n = strlen(name);
    for (int32_t k = 0; k < t->nadded; k++)
        if (same_bytes(t, t->added[k], name, n)) return t->added[k];
    return -1;
}

int32_t tokenizer_eos_id(const tokenizer *t)
{
    if (t->eos_config >= 0) return t->eos_config;
    static const char *const names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        int32_t id = tokenizer_special_id(t, names[k]);
        if (id >= 0) return id;
    }
    return -1;
}

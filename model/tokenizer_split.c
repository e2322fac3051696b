/* tokenizer_split.c — pre-tokenization of byte-level BPE: the split regex
 * (PCRE2, JIT-compiled) and the added tokens cut out before it.
 *
 * HF works on valid UTF-8 only. Here each maximal run of bytes that are not
 * valid UTF-8 is one chunk of its own, and the valid runs around it are
 * split by the regex as separate texts; on valid UTF-8 the chunks are
 * exactly HF's. */
#include "model_util.h"
#include "tokenizer_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the split regex ------------------------------------------------------- */

/* HF compiles split regexes with Oniguruma, where \s is White_Space: the six
 * ASCII/Latin-1 controls and Z*. PCRE2 with UCP adds U+180E; so \s and \S
 * are spelled out before compiling (\S inside a class is left to PCRE2). */
#define TOK_WS_ITEMS "\\t\\n\\x0B\\f\\r\\x{85}\\p{Z}"

static char *rewrite_whitespace(const char *p)
{
    size_t n = strlen(p);
    char *out = malloc(n * (sizeof "[^" TOK_WS_ITEMS "]") + 1), *o = out;
    bool in_class = false;
    if (!out) return NULL;
    for (size_t i = 0; i < n;) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[i + 1];
            const char *rep = NULL;
            if (d == 's') rep = in_class ? TOK_WS_ITEMS : "[" TOK_WS_ITEMS "]";
            if (d == 'S' && !in_class) rep = "[^" TOK_WS_ITEMS "]";
            if (rep) {
                o += sprintf(o, "%s", rep);
                i += 2;
                continue;
            }
            if (d == 'Q') { /* \Q...\E is literal text: copy it untouched */
                const char *e = strstr(p + i + 2, "\\E");
                size_t m = e ? (size_t)(e - p) + 2 - i : n - i;
                memcpy(o, p + i, m);
                o += m;
                i += m;
                continue;
            }
            *o++ = c;
            *o++ = d;
            i += 2;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            *o++ = p[i++];
            if (i < n && p[i] == '^') *o++ = p[i++];
            if (i < n && p[i] == ']') *o++ = p[i++]; /* a leading ] is a member */
            continue;
        }
        if (c == '[' && in_class && i + 1 < n && p[i + 1] == ':') {
            const char *e = strstr(p + i + 2, ":]");
            size_t m = e ? (size_t)(e - p) + 2 - i : 1;
            memcpy(o, p + i, m);
            o += m;
            i += m;
            continue;
        }
        if (c == ']' && in_class) in_class = false;
        *o++ = p[i++];
    }
    *o = 0;
    return out;
}

int tok_set_pretokenizer(tokenizer *t, tok_pre_style style, const char *pattern,
                         bool literal, bool add_prefix_space, const char *src, char *err,
                         size_t errlen)
{
    t->style = style;
    t->pattern_literal = literal;
    t->add_prefix_space = add_prefix_space;
    free(t->pattern);
    t->pattern = NULL;
    pcre2_code_free(t->re);
    t->re = NULL;
    if (!pattern) return 0;
    if (!(t->pattern = strdup(pattern))) {
        model_errf(err, errlen, "%s: out of memory", src);
        return -1;
    }
    char *compiled = literal ? strdup(pattern) : rewrite_whitespace(pattern);
    if (!compiled) {
        model_errf(err, errlen, "%s: out of memory", src);
        return -1;
    }
    int code;
    PCRE2_SIZE at;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    t->re = pcre2_compile((PCRE2_SPTR)compiled, PCRE2_ZERO_TERMINATED, opts, &code, &at, NULL);
    free(compiled);
    if (!t->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        model_errf(err, errlen, "%s: split regex \"%s\" does not compile: %s", src, pattern,
                (const char *)msg);
        return -1;
    }
    /* Without JIT (an architecture PCRE2 cannot JIT for) matching is slower
     * but the same, so a failure here is not an error. */
    pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE);
    return 0;
}

/* ---- pre-tokenization ------------------------------------------------------ */

struct tok_splitter {
    const tokenizer *t;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
    char *buf;
    size_t cap;
};

tok_splitter *tok_splitter_new(const tokenizer *t)
{
    tok_splitter *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->t = t;
    if (!t->re) return s;
    s->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    s->mc = pcre2_match_context_create(NULL);
    /* Long runs of letters or spaces backtrack deeper than the default
     * 32 KiB JIT stack allows. */
    s->js = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
    if (!s->md || !s->mc || !s->js) {
        tok_splitter_free(s);
        return NULL;
    }
    pcre2_jit_stack_assign(s->mc, NULL, s->js);
    return s;
}

void tok_splitter_free(tok_splitter *s)
{
    if (!s) return;
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mc);
    pcre2_jit_stack_free(s->js);
    free(s->buf);
    free(s);
}

/* Regex matches and the gaps between them are chunks ("Isolated"). An
 * empty match is no chunk: the search goes on one character later. */
static int split_valid_run(tok_splitter *s, const char *p, size_t n, tok_chunk_fn fn,
                           void *ctx, char *err, size_t errlen)
{
    size_t gap = 0, from = 0;
    while (from < n) {
        int rc = pcre2_match(s->t->re, (PCRE2_SPTR)p, n, from, PCRE2_NO_UTF_CHECK, s->md,
                             s->mc);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            model_errf(err, errlen, "split regex failed: %s", (const char *)msg);
            return -1;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) {
            if (ms >= n) break;
            from = ms + tok_utf8_valid((const unsigned char *)p + ms, n - ms, NULL);
            continue;
        }
        if (ms > gap && fn(ctx, p + gap, ms - gap)) goto fail;
        if (fn(ctx, p + ms, me - ms)) goto fail;
        gap = from = me;
    }
    if (gap < n && fn(ctx, p + gap, n - gap)) goto fail;
    return 0;
fail:
    model_errf(err, errlen, "out of memory");
    return -1;
}

int tok_split(tok_splitter *s, const char *text, size_t len, tok_chunk_fn fn, void *ctx,
              char *err, size_t errlen)
{
    const tokenizer *t = s->t;
    if (len == 0) return 0;
    if (t->style == TOK_PRE_BYTELEVEL && t->add_prefix_space && text[0] != ' ') {
        if (model_grow((void **)&s->buf, 1, len + 1, &s->cap)) goto oom;
        s->buf[0] = ' ';
        memcpy(s->buf + 1, text, len);
        text = s->buf;
        len++;
    }
    if (!t->re) {
        if (fn(ctx, text, len)) goto oom;
        return 0;
    }
    const unsigned char *u = (const unsigned char *)text;
    for (size_t pos = 0; pos < len;) {
        size_t e = pos;
        while (e < len) {
            size_t k = u[e] < 0x80 ? 1 : tok_utf8_valid(u + e, len - e, NULL);
            if (k == 0) break;
            e += k;
        }
        if (e > pos && split_valid_run(s, text + pos, e - pos, fn, ctx, err, errlen)) return -1;
        size_t f = e;
        while (f < len && tok_utf8_valid(u + f, len - f, NULL) == 0) f++;
        if (f > e && fn(ctx, text + e, f - e)) goto oom;
        pos = f;
    }
    return 0;
oom:
    model_errf(err, errlen, "out of memory");
    return -1;
}

/* ---- added tokens ---------------------------------------------------------- */

void tok_matchset_init(tok_matchset *m, const char *const *strs, const size_t *lens, int n)
{
    m->n = n;
    m->strs = strs;
    m->lens = lens;
    memset(m->first, 0, sizeof m->first);
    for (int k = 0; k < n; k++)
        if (lens[k]) m->first[(unsigned char)strs[k][0]] = true;
}

int tok_matchset_find(const tok_matchset *m, const char *text, size_t len, size_t *pos)
{
    for (size_t i = 0; i < len; i++) {
        if (!m->first[(unsigned char)text[i]]) continue;
        int best = -1;
        for (int k = 0; k < m->n; k++) {
            size_t l = m->lens[k];
            if (l && l <= len - i && (best < 0 || l > m->lens[best]) &&
                memcmp(text + i, m->strs[k], l) == 0)
                best = k;
        }
        if (best >= 0) {
            *pos = i;
            return best;
        }
    }
    return -1;
}

/* data_build.c — reading a corpus and tokenizing it into training and
 * validation sides, in the layout data.c writes to its cache. The rules
 * (templates, masking, the split) are described at the top of data.c. */
#include "data_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const data_spec *spec;
    const tokenizer *tok;
    int32_t eos;
    size_t W;          /* T + 1: tokens of one window */
    char *err;
    size_t errlen;
} build_ctx;

static int oom(build_ctx *c, const char *path)
{
    snprintf(c->err, c->errlen, "%s: out of memory while tokenizing", path);
    return -1;
}

/* "a.txt" or "a.txt (and 2 more files)": errors about the whole corpus. */
static const char *corpus_name(const data_spec *s, char *buf, size_t len)
{
    if (s->nfiles == 1) return s->files[0];
    snprintf(buf, len, "%s (and %d more files)", s->files[0], s->nfiles - 1);
    return buf;
}

static int read_whole(build_ctx *c, const char *path, char **out, size_t *outlen)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(c->err, c->errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(c->err, c->errlen, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    /* The size is a hint: read to EOF in case the file grew meanwhile. */
    size_t cap = (size_t)st.st_size + 1, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            close(fd);
            return oom(c, path);
        }
        if (n == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
            continue;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            snprintf(c->err, c->errlen, "%s: cannot read: %s", path, strerror(errno));
            free(buf);
            close(fd);
            return -1;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    *out = buf;
    *outlen = n;
    return 0;
}

/* Appends the tokens of text to toks and, when learn is not NULL, one flag
 * per token to it. */
static int encode_into(build_ctx *c, const char *path, const char *text, size_t len,
                       bool allow_special, data_i32s *toks, data_chars *learn, char flag)
{
    int32_t *ids = NULL;
    size_t n = 0;
    char terr[256];
    if (tokenizer_encode(c->tok, text, len, allow_special, &ids, &n, terr, sizeof terr) != 0) {
        snprintf(c->err, c->errlen, "%s: %s", path, terr);
        return -1;
    }
    int rc = data_i32s_push(toks, ids, n);
    for (size_t i = 0; learn && rc == 0 && i < n; i++) rc = data_chars_push(learn, &flag, 1);
    free(ids);
    return rc != 0 ? oom(c, path) : 0;
}

/* First occurrence of needle in hay[from, len), or len. */
static size_t find_sep(const char *hay, size_t len, size_t from, const char *needle, size_t nlen)
{
    for (size_t i = from; i + nlen <= len; i++) {
        const char *p = memchr(hay + i, needle[0], len - nlen + 1 - i);
        if (!p) break;
        i = (size_t)(p - hay);
        if (memcmp(p, needle, nlen) == 0) return i;
    }
    return len;
}

/* ---- text ------------------------------------------------------------------ */

typedef struct {
    double u;
    int64_t doc;
} ranked;

static int by_u(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->u != y->u) return x->u < y->u ? -1 : 1;
    return x->doc < y->doc ? -1 : x->doc > y->doc;
}

/* Joins the documents marked `want` in `in_val` with EOS between them and
 * keeps whole windows. */
static int emit_docs(build_ctx *c, data_side *s, const data_i32s *all, const data_i64s *start,
                     const char *in_val, char want)
{
    size_t ndocs = start->n - 1;
    bool first = true;
    for (size_t d = 0; d < ndocs; d++) {
        if (in_val[d] != want) continue;
        if ((!first && data_i32s_push(&s->tok, &c->eos, 1)) ||
            data_i32s_push(&s->tok, all->p + start->p[d], (size_t)(start->p[d + 1] - start->p[d])))
            return oom(c, "corpus");
        first = false;
    }
    s->n = (int64_t)(s->tok.n / c->W);
    s->tok.n = (size_t)s->n * c->W;
    return 0;
}

static int split_text(build_ctx *c, data_built *b, const data_i32s *all, const data_i64s *start,
                      const char *name)
{
    const size_t W = c->W, ndocs = start->n - 1;
    const double f = c->spec->val_fraction;
    ranked *r = malloc(ndocs * sizeof *r);
    int64_t *pre = malloc((ndocs + 1) * sizeof *pre);
    char *in_val = calloc(ndocs, 1);
    int rc = -1;
    if (!r || !pre || !in_val) {
        rc = oom(c, name);
        goto out;
    }
    for (size_t d = 0; d < ndocs; d++) r[d] = (ranked){data_split_point(d), (int64_t)d};
    qsort(r, ndocs, sizeof *r, by_u);
    pre[0] = 0;
    for (size_t j = 0; j < ndocs; j++)
        pre[j + 1] = pre[j] + start->p[r[j].doc + 1] - start->p[r[j].doc];
    /* The hash puts the k0 documents of lowest u in validation. When that
     * leaves a side without a whole window, take the nearest k that gives
     * both one, so as few documents as possible move. */
    size_t k0 = 0, k = 0;
    bool found = f <= 0;
    while (k0 < ndocs && r[k0].u < f) k0++;
    for (size_t dist = 0; !found && dist <= ndocs; dist++) {
        for (int sgn = -1; sgn <= 1 && !found; sgn += 2) {
            if ((sgn < 0 && dist > k0) || (sgn > 0 && dist == 0)) continue;
            k = sgn < 0 ? k0 - dist : k0 + dist;
            if (k < 1 || k >= ndocs) continue;
            int64_t vlen = pre[k] + (int64_t)k - 1;
            int64_t tlen = pre[ndocs] - pre[k] + (int64_t)(ndocs - k) - 1;
            found = vlen >= (int64_t)W && tlen >= (int64_t)W;
        }
    }
    if (found) {
        for (size_t j = 0; j < k; j++) in_val[r[j].doc] = 1;
        rc = emit_docs(c, &b->train, all, start, in_val, 0);
        if (rc == 0) rc = emit_docs(c, &b->val, all, start, in_val, 1);
        goto out;
    }
    /* Too few documents (one book in one file): split the windows of the
     * joined stream by the same hash of the window index instead. */
    b->info.split_by_window = true;
    data_side whole = {0};
    if (emit_docs(c, &whole, all, start, in_val, 0) != 0) goto out;
    int64_t nw = whole.n, lo = 0, hi = 0, nval = 0;
    if (nw < 2) {
        snprintf(c->err, c->errlen,
                 "%s: %lld tokens make one sequence of %zu (seq_len %zu + 1), too few for "
                 "both training and validation (val_fraction %g): add text, lower seq_len or "
                 "set val_fraction 0", name, (long long)(all->n + ndocs - 1), W, W - 1, f);
        free(whole.tok.p);
        goto out;
    }
    free(in_val);
    if (!(in_val = calloc((size_t)nw, 1))) {
        free(whole.tok.p);
        rc = oom(c, name);
        goto out;
    }
    for (int64_t w = 0; w < nw; w++) {
        double u = data_split_point((uint64_t)w);
        in_val[w] = u < f;
        nval += in_val[w];
        if (u < data_split_point((uint64_t)lo)) lo = w;
        if (u > data_split_point((uint64_t)hi)) hi = w;
    }
    if (nval == 0) in_val[lo] = 1;
    if (nval == nw) in_val[hi] = 0;
    rc = 0;
    for (int64_t w = 0; w < nw && rc == 0; w++) {
        data_side *s = in_val[w] ? &b->val : &b->train;
        s->n++;
        if (data_i32s_push(&s->tok, whole.tok.p + (size_t)w * W, W)) rc = oom(c, name);
    }
    free(whole.tok.p);
out:
    free(r);
    free(pre);
    free(in_val);
    return rc;
}

static int build_text(build_ctx *c, data_built *b)
{
    const data_spec *sp = c->spec;
    const char *sep = sp->separator && *sp->separator ? sp->separator : NULL;
    size_t seplen = sep ? strlen(sep) : 0;
    data_i32s all = {0};
    data_i64s start = {0};
    char namebuf[512];
    const char *name = corpus_name(sp, namebuf, sizeof namebuf);
    int rc = -1;
    for (int f = 0; f < sp->nfiles; f++) {
        char *buf;
        size_t len;
        if (read_whole(c, sp->files[f], &buf, &len) != 0) goto out;
        for (size_t pos = 0; pos < len;) {
            size_t end = sep ? find_sep(buf, len, pos, sep, seplen) : len;
            /* Empty documents (a separator at the end, two in a row) carry
             * nothing and would only add an EOS. */
            if (end > pos) {
                if (data_i64s_push(&start, (int64_t)all.n)) {
                    free(buf);
                    rc = oom(c, sp->files[f]);
                    goto out;
                }
                if (encode_into(c, sp->files[f], buf + pos, end - pos, false, &all, NULL, 0)) {
                    free(buf);
                    goto out;
                }
            }
            pos = end + seplen;
        }
        free(buf);
    }
    size_t ndocs = start.n;
    if (ndocs == 0) {
        snprintf(c->err, c->errlen, "%s: empty corpus: no text", name);
        goto out;
    }
    if (data_i64s_push(&start, (int64_t)all.n)) {
        rc = oom(c, name);
        goto out;
    }
    int64_t stream = (int64_t)(all.n + ndocs - 1);
    b->info.documents = (int64_t)ndocs;
    b->info.corpus_tokens = stream;
    if (stream < (int64_t)c->W) {
        snprintf(c->err, c->errlen, "%s: %lld tokens, fewer than one sequence of %zu (seq_len %zu + 1)",
                 name, (long long)stream, c->W, c->W - 1);
        goto out;
    }
    rc = split_text(c, b, &all, &start, name);
out:
    free(all.p);
    free(start.p);
    return rc;
}

/* ---- JSONL ----------------------------------------------------------------- */

/* A string member of o, or NULL with a message (file:line). */
static const char *get_str(build_ctx *c, json_t *o, const char *key, const char *where,
                           const char *path, int line, size_t *len, bool optional)
{
    json_t *v = json_object_get(o, key);
    if (!v && optional) {
        *len = 0;
        return "";
    }
    if (!json_is_string(v)) {
        snprintf(c->err, c->errlen,
                 "%s:%d: %s\"%s\" %s (expected {\"instruction\", \"input\", \"output\"} or "
                 "{\"messages\": [{\"role\", \"content\"}, ...]})",
                 path, line, where, key, v ? "is not a string" : "is missing");
        return NULL;
    }
    *len = json_string_length(v);
    return json_string_value(v);
}

static int push_str(data_chars *s, const char *p, size_t n) { return data_chars_push(s, p, n); }

/* prompt_template with {instruction} and {input} filled in. */
static int fill_template(data_chars *out, const char *tpl, const char *ins, size_t inslen,
                         const char *in, size_t inlen)
{
    static const char *const def_input =
        "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n";
    static const char *const def_plain = "### Instruction:\n{instruction}\n\n### Response:\n";
    if (!tpl) tpl = inlen ? def_input : def_plain;
    for (const char *p = tpl; *p;) {
        int rc;
        if (strncmp(p, "{instruction}", 13) == 0) {
            rc = push_str(out, ins, inslen);
            p += 13;
        } else if (strncmp(p, "{input}", 7) == 0) {
            rc = push_str(out, in, inlen);
            p += 7;
        } else {
            rc = push_str(out, p++, 1);
        }
        if (rc) return -1;
    }
    return push_str(out, "", 0);
}

/* The tokens of one example and, per token, whether it is learned. */
static int example_tokens(build_ctx *c, json_t *o, const char *path, int line, data_i32s *toks,
                          data_chars *learn, data_chars *prompt)
{
    size_t l1, l2, l3;
    prompt->n = 0;
    json_t *msgs = json_object_get(o, "messages");
    if (!msgs) {
        const char *ins = get_str(c, o, "instruction", "", path, line, &l1, false);
        const char *in = ins ? get_str(c, o, "input", "", path, line, &l2, true) : NULL;
        const char *ans = in ? get_str(c, o, "output", "", path, line, &l3, false) : NULL;
        if (!ans) return -1;
        if (fill_template(prompt, c->spec->prompt_template, ins, l1, in, l2)) return oom(c, path);
        if (encode_into(c, path, prompt->p, prompt->n, true, toks, learn, 0) ||
            encode_into(c, path, ans, l3, true, toks, learn, 1))
            return -1;
        return data_i32s_push(toks, &c->eos, 1) || data_chars_push(learn, "\1", 1) ? oom(c, path) : 0;
    }
    if (!json_is_array(msgs)) {
        snprintf(c->err, c->errlen, "%s:%d: \"messages\" is not an array", path, line);
        return -1;
    }
    bool answered = false;
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        char where[48];
        snprintf(where, sizeof where, "messages[%zu]: ", i);
        const char *role = json_is_object(m) ? get_str(c, m, "role", where, path, line, &l1, false) : NULL;
        const char *text = role ? get_str(c, m, "content", where, path, line, &l2, false) : NULL;
        if (!json_is_object(m))
            snprintf(c->err, c->errlen, "%s:%d: messages[%zu] is not an object", path, line, i);
        if (!text) return -1;
        if (push_str(prompt, role, l1) || push_str(prompt, ": ", 2)) return oom(c, path);
        if (strcmp(role, "assistant") != 0) {
            if (push_str(prompt, text, l2) || push_str(prompt, "\n", 1)) return oom(c, path);
            continue;
        }
        /* The prompt so far is encoded as a whole, as a generator would
         * encode it before answering; the answer and its EOS are learned. */
        if (encode_into(c, path, prompt->p, prompt->n, true, toks, learn, 0) ||
            encode_into(c, path, text, l2, true, toks, learn, 1))
            return -1;
        if (data_i32s_push(toks, &c->eos, 1) || data_chars_push(learn, "\1", 1)) return oom(c, path);
        prompt->n = 0;
        answered = true;
    }
    if (!answered) {
        snprintf(c->err, c->errlen, "%s:%d: \"messages\" has no assistant turn to learn", path, line);
        return -1;
    }
    return 0;
}

static int build_jsonl(build_ctx *c, data_built *b)
{
    const data_spec *sp = c->spec;
    data_side all = {0};
    data_i64s index = {0};
    data_i32s toks = {0};
    data_chars learn = {0}, prompt = {0};
    char namebuf[512];
    const char *name = corpus_name(sp, namebuf, sizeof namebuf);
    int64_t nread = 0;
    int rc = -1;
    if (data_i64s_push(&all.off, 0)) goto nomem;
    for (int f = 0; f < sp->nfiles; f++) {
        const char *path = sp->files[f];
        char *buf;
        size_t len;
        int line = 0;
        if (read_whole(c, path, &buf, &len) != 0) goto out;
        /* Editors on Windows start UTF-8 files with a byte order mark. */
        size_t bom = len >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0 ? 3 : 0;
        for (size_t pos = bom; pos < len; line++) {
            const char *s = buf + pos, *nl = memchr(s, '\n', len - pos);
            size_t n = nl ? (size_t)(nl - s) : len - pos;
            pos += n + 1;
            if (n && s[n - 1] == '\r') n--;
            size_t blank = 0;
            while (blank < n && (s[blank] == ' ' || s[blank] == '\t')) blank++;
            if (blank == n) continue;   /* blank lines are not examples */
            json_error_t je;
            json_t *o = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
            if (!o || !json_is_object(o)) {
                if (o) snprintf(c->err, c->errlen, "%s:%d: not a JSON object", path, line + 1);
                else snprintf(c->err, c->errlen, "%s:%d: invalid JSON: %s (column %d)", path,
                              line + 1, je.text, je.column);
                json_decref(o);
                free(buf);
                goto out;
            }
            toks.n = learn.n = 0;
            int erc = example_tokens(c, o, path, line + 1, &toks, &learn, &prompt);
            json_decref(o);
            if (erc) {
                free(buf);
                goto out;
            }
            int64_t idx = nread++;
            b->info.corpus_tokens += (int64_t)toks.n;
            size_t L = toks.n < c->W ? toks.n : c->W;
            bool any = false;
            for (size_t j = 1; j < L; j++) any |= learn.p[j] != 0;
            b->info.truncated += toks.n > c->W;
            if (!any) {
                b->info.dropped++;
                continue;
            }
            /* Labels are the next token where it is learned, so the
             * T+1st token appears only as a label. */
            int bad = data_i32s_push(&all.tok, toks.p, L - 1);
            for (size_t j = 0; !bad && j + 1 < L; j++) {
                int32_t lab = learn.p[j + 1] ? toks.p[j + 1] : DATA_IGNORE;
                bad = data_i32s_push(&all.lab, &lab, 1);
            }
            if (bad || data_i64s_push(&all.off, (int64_t)all.tok.n) || data_i64s_push(&index, idx)) {
                free(buf);
                goto nomem;
            }
            all.n++;
        }
        free(buf);
    }
    b->info.documents = nread;
    const double fr = sp->val_fraction;
    if (nread == 0) {
        snprintf(c->err, c->errlen, "%s: empty corpus: no examples", name);
        goto out;
    }
    if (all.n == 0) {
        snprintf(c->err, c->errlen, "%s: every example's prompt fills the whole sequence of %zu "
                 "tokens (seq_len %zu + 1): nothing left to learn", name, c->W, c->W - 1);
        goto out;
    }
    if (fr > 0 && all.n < 2) {
        snprintf(c->err, c->errlen, "%s: 1 example, too few for both training and validation "
                 "(val_fraction %g): add examples or set val_fraction 0", name, fr);
        goto out;
    }
    /* By the hash of the example's index; if one side is empty, the example
     * nearest the threshold changes side. */
    char *in_val = calloc((size_t)all.n, 1);
    if (!in_val) goto nomem;
    int64_t nval = 0, lo = 0, hi = 0;
    for (int64_t e = 0; e < all.n; e++) {
        double u = data_split_point((uint64_t)index.p[e]);
        in_val[e] = u < fr;
        nval += in_val[e];
        if (u < data_split_point((uint64_t)index.p[lo])) lo = e;
        if (u > data_split_point((uint64_t)index.p[hi])) hi = e;
    }
    if (fr > 0 && nval == 0) in_val[lo] = 1;
    if (nval == all.n) in_val[hi] = 0;
    rc = 0;
    for (int64_t e = 0; e < all.n && rc == 0; e++) {
        data_side *s = in_val[e] ? &b->val : &b->train;
        size_t o0 = (size_t)all.off.p[e], n = (size_t)all.off.p[e + 1] - o0;
        if ((s->n == 0 && data_i64s_push(&s->off, 0)) || data_i32s_push(&s->tok, all.tok.p + o0, n) ||
            data_i32s_push(&s->lab, all.lab.p + o0, n) || data_i64s_push(&s->off, (int64_t)s->tok.n))
            rc = -1;
        s->n++;
    }
    free(in_val);
    if (rc == 0) goto out;
nomem:
    rc = oom(c, name);
out:
    free(all.tok.p);
    free(all.lab.p);
    free(all.off.p);
    free(index.p);
    free(toks.p);
    free(learn.p);
    free(prompt.p);
    return rc;
}

int data_build(data_built *b, const data_spec *spec, const tokenizer *tok, int32_t eos,
               char *err, size_t errlen)
{
    build_ctx c = {spec, tok, eos, (size_t)spec->seq_len + 1, err, errlen};
    memset(b, 0, sizeof *b);
    int rc = spec->format == DATA_JSONL ? build_jsonl(&c, b) : build_text(&c, b);
    if (rc == 0) {
        b->info.train_windows = b->train.n;
        b->info.val_windows = b->val.n;
    } else {
        data_built_free(b);
    }
    return rc;
}

void data_built_free(data_built *b)
{
    data_side *sides[2] = {&b->train, &b->val};
    for (int i = 0; i < 2; i++) {
        free(sides[i]->tok.p);
        free(sides[i]->lab.p);
        free(sides[i]->off.p);
        memset(sides[i], 0, sizeof *sides[i]);
    }
}

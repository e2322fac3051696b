/* tokenizer_json.c — HF tokenizer.json of a byte-level BPE: read and write.
 *
 * Reading is strict about everything that changes the ids (model type,
 * normalizer, pre-tokenizer, decoder, merges that name unknown tokens) and
 * ignores what does not (truncation, padding, post_processor: shardnode adds
 * no BOS/EOS when it encodes). Writing produces what HF `tokenizers` writes
 * for a GPT-2 style tokenizer, or the Llama-3 style Sequence[Split,
 * ByteLevel] when the split regex is not GPT-2's. */
#include "model_util.h"
#include "tokenizer_internal.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* HF writes null for "absent". */
static json_t *get(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return v && json_is_null(v) ? NULL : v;
}

static const char *type_name(const json_t *o)
{
    const char *s = json_string_value(json_object_get(o, "type"));
    return s ? s : "(without a type)";
}

static int get_bool(const json_t *o, const char *key, bool dflt, bool *out, const char *src,
                    const char *where, char *err, size_t errlen)
{
    json_t *v = get(o, key);
    *out = dflt;
    if (!v) return 0;
    if (!json_is_boolean(v)) {
        model_errf(err, errlen, "%s: %s.%s must be a boolean, got %s", src, where, key,
                model_json_kind(v));
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

/* A string of tokenizer.json as bytes: through the byte alphabet when every
 * character is in it, else (specials such as "<｜begin▁of▁sentence｜>" in a
 * vocabulary) its own UTF-8, as HF's ByteLevel decoder does. */
static void string_bytes(const char *s, char *out, size_t *n, bool *raw)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t len = strlen(s), o = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t k = tok_utf8_valid(u + i, len - i, &cp);
        int b = k ? tok_cp_to_byte(cp) : -1;
        if (b < 0) {
            memcpy(out, s, len);
            *n = len;
            *raw = true;
            return;
        }
        out[o++] = (char)b;
        i += k;
    }
    *n = o;
    *raw = false;
}

/* ---- pre-tokenizer, normalizer, decoder ----------------------------------- */

typedef struct {
    tok_pre_style style;
    const char *pattern;
    bool literal;
    bool add_prefix_space;
} pre_spec;

static int parse_bytelevel(const json_t *o, bool *use_regex, bool *aps, const char *src,
                           char *err, size_t errlen)
{
    /* HF's ByteLevel defaults: add_prefix_space true, use_regex true. */
    if (get_bool(o, "use_regex", true, use_regex, src, "pre_tokenizer", err, errlen) ||
        get_bool(o, "add_prefix_space", true, aps, src, "pre_tokenizer", err, errlen))
        return -1;
    return 0;
}

static int parse_split(const json_t *o, pre_spec *ps, const char *src, char *err,
                       size_t errlen)
{
    json_t *pat = get(o, "pattern");
    const char *behavior = json_string_value(get(o, "behavior"));
    bool invert;
    if (get_bool(o, "invert", false, &invert, src, "pre_tokenizer Split", err, errlen))
        return -1;
    json_t *re = pat ? json_object_get(pat, "Regex") : NULL;
    json_t *lit = pat ? json_object_get(pat, "String") : NULL;
    if (!json_is_string(re) && !json_is_string(lit)) {
        model_errf(err, errlen, "%s: pre_tokenizer Split needs pattern {\"Regex\": ...} or "
                "{\"String\": ...}", src);
        return -1;
    }
    if (!behavior || strcmp(behavior, "Isolated") != 0) {
        model_errf(err, errlen, "%s: pre_tokenizer Split behavior %s is not supported "
                "(only Isolated)", src, behavior ? behavior : "(missing)");
        return -1;
    }
    if (invert) {
        model_errf(err, errlen, "%s: pre_tokenizer Split with invert true is not supported", src);
        return -1;
    }
    ps->pattern = json_string_value(re ? re : lit);
    ps->literal = !re;
    return 0;
}

static int parse_pre_tokenizer(const json_t *root, pre_spec *ps, const char *src, char *err,
                               size_t errlen)
{
    json_t *pre = get(root, "pre_tokenizer");
    bool use_regex, aps;
    memset(ps, 0, sizeof *ps);
    if (!pre) {
        model_errf(err, errlen, "%s: BPE without a ByteLevel pre_tokenizer is not supported "
                "(byte-level BPE only)", src);
        return -1;
    }
    const char *type = type_name(pre);
    if (strcmp(type, "ByteLevel") == 0) {
        if (parse_bytelevel(pre, &use_regex, &aps, src, err, errlen)) return -1;
        ps->style = TOK_PRE_BYTELEVEL;
        ps->pattern = use_regex ? TOK_GPT2_PATTERN : NULL;
        ps->add_prefix_space = aps;
        return 0;
    }
    if (strcmp(type, "Sequence") != 0) {
        model_errf(err, errlen, "%s: pre_tokenizer %s is not supported (byte-level BPE only)", src,
                type);
        return -1;
    }
    /* Llama 3: [Split {regex, Isolated}, ByteLevel {use_regex false}]. The
     * ByteLevel step must come last: a Split after it would see the byte
     * alphabet, not the text. */
    json_t *list = get(pre, "pretokenizers");
    size_t n = json_array_size(list), nsplit = 0;
    bool seen_bytelevel = false;
    for (size_t i = 0; i < n; i++) {
        json_t *p = json_array_get(list, i);
        const char *pt = type_name(p);
        if (seen_bytelevel) {
            model_errf(err, errlen, "%s: pre_tokenizer %s after ByteLevel is not supported", src,
                    pt);
            return -1;
        }
        if (strcmp(pt, "Split") == 0) {
            if (++nsplit > 1) {
                model_errf(err, errlen, "%s: more than one pre_tokenizer Split is not supported",
                        src);
                return -1;
            }
            if (parse_split(p, ps, src, err, errlen)) return -1;
        } else if (strcmp(pt, "ByteLevel") == 0) {
            if (parse_bytelevel(p, &use_regex, &aps, src, err, errlen)) return -1;
            seen_bytelevel = true;
        } else {
            model_errf(err, errlen, "%s: pre_tokenizer %s is not supported (byte-level BPE only)",
                    src, pt);
            return -1;
        }
    }
    if (!seen_bytelevel) {
        model_errf(err, errlen, "%s: BPE without a ByteLevel pre_tokenizer is not supported "
                "(byte-level BPE only)", src);
        return -1;
    }
    if (nsplit == 0) {
        ps->style = TOK_PRE_BYTELEVEL;
        ps->pattern = use_regex ? TOK_GPT2_PATTERN : NULL;
        ps->add_prefix_space = aps;
        return 0;
    }
    if (use_regex || aps) {
        model_errf(err, errlen, "%s: pre_tokenizer ByteLevel after a Split must have use_regex "
                "and add_prefix_space false", src);
        return -1;
    }
    ps->style = TOK_PRE_SPLIT;
    return 0;
}

static int check_normalizer_decoder(const json_t *root, const char *src, char *err,
                                    size_t errlen)
{
    json_t *norm = get(root, "normalizer"), *dec = get(root, "decoder");
    /* An empty Sequence changes nothing; any real normalizer changes ids. */
    if (norm && !(strcmp(type_name(norm), "Sequence") == 0 &&
                  json_array_size(get(norm, "normalizers")) == 0)) {
        model_errf(err, errlen, "%s: normalizer %s is not supported (byte-level BPE only)", src,
                type_name(norm));
        return -1;
    }
    if (!dec) {
        model_errf(err, errlen, "%s: decoder is missing: byte-level BPE needs the ByteLevel "
                "decoder", src);
        return -1;
    }
    if (strcmp(type_name(dec), "ByteLevel") != 0) {
        model_errf(err, errlen, "%s: decoder %s is not supported (byte-level BPE only)", src,
                type_name(dec));
        return -1;
    }
    return 0;
}

/* ---- model ------------------------------------------------------------------- */

static int check_model_options(const json_t *model, tokenizer *t, const char *src, char *err,
                               size_t errlen)
{
    json_t *type = json_object_get(model, "type");
    if (!json_is_string(type)) {
        model_errf(err, errlen, "%s: model.type is missing", src);
        return -1;
    }
    if (strcmp(json_string_value(type), "BPE") != 0) {
        model_errf(err, errlen, "%s: model type %s is not supported (byte-level BPE only)", src,
                json_string_value(type));
        return -1;
    }
    json_t *dropout = get(model, "dropout");
    if (dropout && !(json_is_number(dropout) && json_number_value(dropout) == 0)) {
        model_errf(err, errlen, "%s: model.dropout must be null or 0 (BPE dropout is not "
                "supported)", src);
        return -1;
    }
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        json_t *v = get(model, affixes[i]);
        if (v && !(json_is_string(v) && json_string_length(v) == 0)) {
            model_errf(err, errlen, "%s: model.%s is not supported (byte-level BPE only)", src,
                    affixes[i]);
            return -1;
        }
    }
    return get_bool(model, "ignore_merges", false, &t->ignore_merges, src, "model", err,
                    errlen);
}

static int load_vocab(tokenizer *t, const json_t *vocab, const char *src, char *err,
                      size_t errlen)
{
    const char *key;
    json_t *v;
    char *buf = NULL;
    size_t cap = 0;
    if (!json_is_object(vocab)) {
        model_errf(err, errlen, "%s: model.vocab must be an object, got %s", src,
                vocab ? model_json_kind(vocab) : "nothing");
        return -1;
    }
    json_object_foreach((json_t *)vocab, key, v) {
        size_t klen = strlen(key), n;
        bool raw;
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= TOK_MAX_ID) {
            model_errf(err, errlen, "%s: model.vocab[\"%s\"] must be an id in [0, %d)", src, key,
                    TOK_MAX_ID);
            goto fail;
        }
        if (id < t->ntok && (t->flags[id] & TOK_PRESENT)) {
            char *other = tok_token_string(t, (int32_t)id);
            model_errf(err, errlen, "%s: model.vocab gives id %lld to both \"%s\" and \"%s\"", src,
                    (long long)id, other ? other : "?", key);
            free(other);
            goto fail;
        }
        if (klen + 1 > cap) {
            cap = 2 * klen + 64;
            free(buf);
            if (!(buf = malloc(cap))) goto oom;
        }
        string_bytes(key, buf, &n, &raw);
        if (tok_set_token(t, (int32_t)id, buf, n, TOK_MODEL | (raw ? TOK_RAW : 0))) goto oom;
    }
    free(buf);
    return 0;
oom:
    model_errf(err, errlen, "%s: out of memory", src);
fail:
    free(buf);
    return -1;
}

/* A merge's side as a vocabulary id. */
static int merge_side(tokenizer *t, const char *s, size_t i, const char *a, const char *b,
                      int32_t *id, const char *src, char *err, size_t errlen)
{
    size_t len = strlen(s), n;
    bool raw;
    char small[256] = {0}, *buf = len <= sizeof small ? small : malloc(len);
    if (!buf) {
        model_errf(err, errlen, "%s: out of memory", src);
        return -1;
    }
    string_bytes(s, buf, &n, &raw);
    *id = tok_lookup(t, buf, n);
    if (buf != small) free(buf);
    if (*id < 0) {
        model_errf(err, errlen, "%s: merges[%zu] \"%s %s\": \"%s\" is not in the vocabulary",
                src, i, a, b, s);
        return -1;
    }
    return 0;
}

static int load_merges(tokenizer *t, const json_t *merges, const char *src, char *err,
                       size_t errlen)
{
    if (!json_is_array(merges)) {
        model_errf(err, errlen, "%s: model.merges must be a list, got %s", src,
                merges ? model_json_kind(merges) : "nothing");
        return -1;
    }
    size_t n = json_array_size(merges);
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(merges, i);
        char *line = NULL;
        const char *a = NULL, *b = NULL;
        int32_t ia, ib;
        if (json_is_string(m)) { /* "a b": exactly one space, as HF requires */
            const char *s = json_string_value(m), *sp = strchr(s, ' ');
            if (sp && !strchr(sp + 1, ' ') && (line = strdup(s))) {
                line[sp - s] = 0;
                a = line;
                b = line + (sp - s) + 1;
            }
        } else if (json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) { /* ["a", "b"] (tokenizers >= 0.20) */
            a = json_string_value(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
        }
        if (!a) {
            model_errf(err, errlen, "%s: merges[%zu] must be \"left right\" or [\"left\", "
                    "\"right\"]", src, i);
            free(line);
            return -1;
        }
        int rc = merge_side(t, a, i, a, b, &ia, src, err, errlen) ||
                 merge_side(t, b, i, a, b, &ib, src, err, errlen) ||
                 tok_add_merge(t, ia, ib, src, err, errlen);
        free(line);
        if (rc) return -1;
    }
    return 0;
}

static int load_added(tokenizer *t, const json_t *root, const char *src, char *err,
                      size_t errlen)
{
    json_t *list = get(root, "added_tokens");
    if (list && !json_is_array(list)) {
        model_errf(err, errlen, "%s: added_tokens must be a list, got %s", src, model_json_kind(list));
        return -1;
    }
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *a = json_array_get(list, i), *jid = json_object_get(a, "id");
        const char *content = json_string_value(json_object_get(a, "content"));
        json_int_t id = json_integer_value(jid);
        bool special;
        if (!json_is_integer(jid) || id < 0 || id >= TOK_MAX_ID) {
            model_errf(err, errlen, "%s: added_tokens[%zu].id must be an id in [0, %d)", src, i,
                    TOK_MAX_ID);
            return -1;
        }
        if (!content || !*content) {
            model_errf(err, errlen, "%s: added_tokens[%zu].content must be a non-empty string",
                    src, i);
            return -1;
        }
        if (get_bool(a, "special", false, &special, src, "added_tokens[]", err, errlen))
            return -1;
        uint8_t fl = TOK_ADDED | (special ? TOK_SPECIAL : 0);
        int32_t id32 = (int32_t)id;
        if (id32 < t->ntok && (t->flags[id32] & TOK_PRESENT)) {
            /* GPT-2 lists <|endoftext|> in both places; that is the same token. */
            char *s = tok_token_string(t, id32);
            bool same = s && (t->flags[id32] & TOK_MODEL) && strcmp(s, content) == 0;
            if (!same) {
                model_errf(err, errlen, "%s: added_tokens[%zu] \"%s\" has id %d, which is "
                        "already \"%s\"", src, i, content, id32, s ? s : "?");
                free(s);
                return -1;
            }
            free(s);
            t->flags[id32] |= fl;
        } else if (tok_set_token(t, id32, content, strlen(content), fl | TOK_RAW)) {
            model_errf(err, errlen, "%s: out of memory", src);
            return -1;
        }
        if (tok_add_added(t, id32)) {
            model_errf(err, errlen, "%s: out of memory", src);
            return -1;
        }
    }
    return 0;
}

/* The eos_token of the tokenizer_config.json beside path, if there is
 * one (transformers' file: a string, or an AddedToken object with
 * "content"): it must be one of the added tokens, and becomes what
 * tokenizer_eos_id gives (SmolLM2-Instruct's "<|im_end|>" ends a chat turn,
 * not "<|endoftext|>"). A file without eos_token changes nothing. */
static int load_config_eos(tokenizer *t, const char *path, char *err, size_t errlen)
{
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
    char *cfg = malloc(dlen + sizeof "tokenizer_config.json");
    if (!cfg) return model_errf(err, errlen, "%s: out of memory", path);
    memcpy(cfg, path, dlen);
    memcpy(cfg + dlen, "tokenizer_config.json", sizeof "tokenizer_config.json");
    json_error_t jerr;
    json_t *root = json_load_file(cfg, JSON_REJECT_DUPLICATES, &jerr), *eos;
    int rc = 0;
    if (!root) {
        if (json_error_code(&jerr) != json_error_cannot_open_file)
            rc = model_errf(err, errlen, "%s: invalid JSON at line %d, column %d: %s", cfg,
                            jerr.line, jerr.column, jerr.text);
    } else if (!json_is_object(root)) {
        rc = model_errf(err, errlen, "%s: expected a JSON object, got %s", cfg,
                        model_json_kind(root));
    } else if ((eos = get(root, "eos_token"))) {
        const char *name = json_is_object(eos) ? json_string_value(get(eos, "content"))
                                               : json_string_value(eos);
        int32_t id = name ? tokenizer_special_id(t, name) : -1;
        if (!name)
            rc = model_errf(err, errlen, "%s: eos_token must be a string or an object with "
                            "\"content\", got %s", cfg, model_json_kind(eos));
        else if (id < 0)
            rc = model_errf(err, errlen, "%s: eos_token \"%s\" is not one of the added "
                            "tokens of %s", cfg, name, path);
        else
            t->eos_config = id;
    }
    json_decref(root);
    free(cfg);
    return rc;
}

int tokenizer_load(tokenizer **out, const char *path, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    tokenizer *t = NULL;
    pre_spec ps;
    *out = NULL;
    if (!root) {
        if (json_error_code(&jerr) == json_error_cannot_open_file)
            model_errf(err, errlen, "%s: cannot read: %s", path, jerr.text);
        else
            model_errf(err, errlen, "%s: invalid JSON at line %d, column %d: %s", path,
                    jerr.line, jerr.column, jerr.text);
        return -1;
    }
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(root)) {
        model_errf(err, errlen, "%s: expected a JSON object, got %s", path, model_json_kind(root));
        goto fail;
    }
    if (!json_is_object(model)) {
        model_errf(err, errlen, "%s: model must be an object, got %s", path,
                model ? model_json_kind(model) : "nothing");
        goto fail;
    }
    if (!(t = tok_new())) {
        model_errf(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    /* The model type first: "WordPiece is not supported" says more than
     * anything about its pre-tokenizer. */
    if (check_model_options(model, t, path, err, errlen) ||
        parse_pre_tokenizer(root, &ps, path, err, errlen) ||
        check_normalizer_decoder(root, path, err, errlen) ||
        load_vocab(t, json_object_get(model, "vocab"), path, err, errlen) ||
        tok_index_vocab(t, path, err, errlen) ||
        load_merges(t, json_object_get(model, "merges"), path, err, errlen) ||
        load_added(t, root, path, err, errlen) ||
        tok_set_pretokenizer(t, ps.style, ps.pattern, ps.literal, ps.add_prefix_space, path,
                             err, errlen) ||
        load_config_eos(t, path, err, errlen))
        goto fail;
    json_decref(root);
    *out = t;
    return 0;
fail:
    json_decref(root);
    tokenizer_free(t);
    return -1;
}

/* ---- writing ------------------------------------------------------------------- */

static int add(json_t *obj, const char *key, json_t *value)
{
    return json_object_set_new(obj, key, value);
}

static json_t *bytelevel_json(bool add_prefix_space, bool use_regex)
{
    json_t *o = json_object();
    int bad = !o;
    bad |= add(o, "type", json_string("ByteLevel"));
    bad |= add(o, "add_prefix_space", json_boolean(add_prefix_space));
    bad |= add(o, "trim_offsets", json_true());
    bad |= add(o, "use_regex", json_boolean(use_regex));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *pre_tokenizer_json(const tokenizer *t)
{
    if (t->style == TOK_PRE_BYTELEVEL)
        return bytelevel_json(t->add_prefix_space, t->pattern != NULL);
    json_t *split = json_object(), *pat = json_object(), *seq = json_object(),
           *list = json_array();
    int bad = !split || !pat || !seq || !list;
    bad |= add(pat, t->pattern_literal ? "String" : "Regex", json_string(t->pattern));
    bad |= add(split, "type", json_string("Split"));
    bad |= add(split, "pattern", pat);
    bad |= add(split, "behavior", json_string("Isolated"));
    bad |= add(split, "invert", json_false());
    bad |= json_array_append_new(list, split);
    bad |= json_array_append_new(list, bytelevel_json(false, false));
    bad |= add(seq, "type", json_string("Sequence"));
    bad |= add(seq, "pretokenizers", list);
    if (bad) {
        json_decref(seq);
        return NULL;
    }
    return seq;
}

static json_t *added_json(const tokenizer *t)
{
    json_t *list = json_array();
    int bad = !list;
    for (int32_t k = 0; k < t->nadded && !bad; k++) {
        int32_t id = t->added[k];
        json_t *a = json_object();
        char *s = tok_token_string(t, id);
        bad |= !a || !s;
        bad |= add(a, "id", json_integer(id));
        bad |= add(a, "content", s ? json_string(s) : NULL);
        bad |= add(a, "single_word", json_false());
        bad |= add(a, "lstrip", json_false());
        bad |= add(a, "rstrip", json_false());
        bad |= add(a, "normalized", json_false());
        bad |= add(a, "special", json_boolean(t->flags[id] & TOK_SPECIAL));
        bad |= json_array_append_new(list, a);
        free(s);
    }
    if (bad) {
        json_decref(list);
        return NULL;
    }
    return list;
}

static json_t *model_json(const tokenizer *t)
{
    json_t *m = json_object(), *vocab = json_object(), *merges = json_array();
    int bad = !m || !vocab || !merges;
    bad |= add(m, "type", json_string("BPE"));
    bad |= add(m, "dropout", json_null());
    bad |= add(m, "unk_token", json_null());
    bad |= add(m, "continuing_subword_prefix", json_null());
    bad |= add(m, "end_of_word_suffix", json_null());
    bad |= add(m, "fuse_unk", json_false());
    bad |= add(m, "byte_fallback", json_false());
    bad |= add(m, "ignore_merges", json_boolean(t->ignore_merges));
    for (int32_t id = 0; id < t->ntok && !bad; id++) {
        if (!(t->flags[id] & TOK_MODEL)) continue;
        char *s = tok_token_string(t, id);
        bad |= !s || add(vocab, s, json_integer(id));
        free(s);
    }
    for (int32_t r = 0; r < t->nmerges && !bad; r++) {
        char *a = tok_token_string(t, t->merges[2 * r]);
        char *b = tok_token_string(t, t->merges[2 * r + 1]);
        char *line = a && b ? malloc(strlen(a) + strlen(b) + 2) : NULL;
        if (line) sprintf(line, "%s %s", a, b);
        bad |= !line || json_array_append_new(merges, json_string(line));
        free(a);
        free(b);
        free(line);
    }
    bad |= add(m, "vocab", vocab);
    bad |= add(m, "merges", merges);
    if (bad) {
        json_decref(m);
        return NULL;
    }
    return m;
}

static int write_chunk(const char *buf, size_t size, void *data)
{
    return atomic_file_write(data, buf, size);
}

int tokenizer_save(const tokenizer *t, const char *path, char *err, size_t errlen)
{
    json_t *root = json_object();
    int bad = !root;
    bad |= add(root, "version", json_string("1.0"));
    bad |= add(root, "truncation", json_null());
    bad |= add(root, "padding", json_null());
    bad |= add(root, "added_tokens", added_json(t));
    bad |= add(root, "normalizer", json_null());
    bad |= add(root, "pre_tokenizer", pre_tokenizer_json(t));
    bad |= add(root, "post_processor", json_null());
    bad |= add(root, "decoder", bytelevel_json(true, true));
    bad |= add(root, "model", model_json(t));
    if (bad) {
        json_decref(root);
        model_errf(err, errlen, "%s: out of memory encoding the tokenizer", path);
        return -1;
    }
    atomic_file f;
    if (atomic_file_begin(&f, path, err, errlen)) {
        json_decref(root);
        return -1;
    }
    /* A failed write is remembered by the atomic file and reported by commit. */
    json_dump_callback(root, write_chunk, &f, JSON_INDENT(2));
    atomic_file_write(&f, "\n", 1);
    json_decref(root);
    return atomic_file_commit(&f, err, errlen);
}

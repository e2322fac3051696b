/* gguf_tokenizer.c — the tokenizer a GGUF file carries in its metadata
 * (tokenizer.ggml.*), written as the HF tokenizer.json that
 * model/tokenizer_json.c reads.
 *
 * Only byte-level BPE (tokenizer.ggml.model "gpt2") maps onto shardnode's
 * tokenizer: its tokens are already in GPT-2's byte alphabet ("Ġthe"), its
 * merges are HF's "left right" strings. tokenizer.ggml.pre names the split
 * regex llama.cpp uses; each one accepted here is written as the
 * pre-tokenizer HF's tokenizer.json of that family has, in a form that
 * splits text identically:
 *   default, gpt2    ByteLevel (GPT-2's regex)
 *   llama-bpe, llama3  Split (Llama 3's regex, Isolated) + ByteLevel
 *   smollm           HF's Digits(individual) + ByteLevel, as one Split
 *                    (GPT-2's regex with single digits first, and the
 *                    trailing-space rule ending at a digit as it does at
 *                    the end of a piece) + ByteLevel
 * SentencePiece ("llama") and other models or pre-tokenizers are refused
 * by name. Token types: 3 (control) become special added tokens, 4
 * (user-defined) added tokens that are not special. */
#include "import.h"
#include "model_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPT2_RE \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define LLAMA3_RE \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+" \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define SMOLLM_RE \
    "\\p{N}|'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?![^\\s\\p{N}])|\\s+"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static int add(json_t *o, const char *k, json_t *v) { return json_object_set_new(o, k, v); }

static json_t *bytelevel(bool use_regex)
{
    return json_pack("{s:s,s:b,s:b,s:b}", "type", "ByteLevel", "add_prefix_space", 0,
                     "trim_offsets", 1, "use_regex", use_regex);
}

static json_t *pre_tokenizer(const char *pre)
{
    const char *re = NULL;
    if (!strcmp(pre, "default") || !strcmp(pre, "gpt2")) return bytelevel(true);
    if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3")) re = LLAMA3_RE;
    else if (!strcmp(pre, "smollm")) re = SMOLLM_RE;
    else return NULL;
    return json_pack("{s:s,s:[{s:s,s:{s:s},s:s,s:b},o]}", "type", "Sequence", "pretokenizers",
                     "type", "Split", "pattern", "Regex", re, "behavior", "Isolated", "invert", 0,
                     bytelevel(false));
}

static const gguf_kv *array_kv(const gguf_file *f, const char *key, bool strings, bool required,
                               char *err, size_t errlen)
{
    const gguf_kv *kv = gguf_kv_find(f, key);
    if (!kv) {
        if (required) model_errf(err, errlen, "%s: required key %s is missing", gguf_path(f), key);
        return NULL;
    }
    bool ok = kv->type == GGUF_ARRAY &&
              (strings ? kv->elem_type == GGUF_STRING
                       : kv->elem_type != GGUF_STRING && kv->elem_type != GGUF_FLOAT32 &&
                             kv->elem_type != GGUF_FLOAT64 && kv->elem_type != GGUF_BOOL);
    if (!ok) {
        model_errf(err, errlen, "%s: byte %llu: key %s must be an array of %s", gguf_path(f),
                   (unsigned long long)kv->offset, key, strings ? "strings" : "integers");
        return NULL;
    }
    return kv;
}

/* Checks the tokenizer model and pre-tokenizer; *pre gets the latter. */
static int check_model(const gguf_file *f, char **pre, char *err, size_t errlen)
{
    const char *path = gguf_path(f);
    char *model = NULL;
    *pre = NULL;
    if (gguf_get_string(f, "tokenizer.ggml.model", true, &model, err, errlen)) return -1;
    if (strcmp(model, "gpt2") != 0) {
        if (!strcmp(model, "llama"))
            model_errf(err, errlen, "%s: key tokenizer.ggml.model is \"llama\" (a SentencePiece "
                       "tokenizer): not supported, shardnode's tokenizer is byte-level BPE "
                       "(\"gpt2\") only", path);
        else
            model_errf(err, errlen, "%s: key tokenizer.ggml.model is \"%s\": not supported "
                       "(byte-level BPE, \"gpt2\", only)", path, model);
        free(model);
        return -1;
    }
    free(model);
    if (gguf_get_string(f, "tokenizer.ggml.pre", false, pre, err, errlen) < 0) return -1;
    if (!*pre && !(*pre = strdup("default"))) return model_errf(err, errlen, "%s: out of memory", path);
    json_t *p = pre_tokenizer(*pre);
    if (!p) {
        model_errf(err, errlen, "%s: key tokenizer.ggml.pre is \"%s\": this pre-tokenizer is not "
                   "supported (default, gpt2, llama-bpe, llama3 and smollm are)", path, *pre);
        free(*pre);
        *pre = NULL;
        return -1;
    }
    json_decref(p);
    return 0;
}

static json_t *build(const gguf_file *f, const char *pre, char *err, size_t errlen)
{
    const char *path = gguf_path(f);
    const gguf_kv *tokens = array_kv(f, "tokenizer.ggml.tokens", true, true, err, errlen);
    if (!tokens) return NULL;
    const gguf_kv *merges = array_kv(f, "tokenizer.ggml.merges", true, true, err, errlen);
    if (!merges) return NULL;
    const gguf_kv *types = array_kv(f, "tokenizer.ggml.token_type", false, false, err, errlen);
    if (!types && gguf_kv_find(f, "tokenizer.ggml.token_type")) return NULL;
    if (types && types->count != tokens->count) {
        model_errf(err, errlen, "%s: byte %llu: key tokenizer.ggml.token_type has %llu entries, "
                   "tokenizer.ggml.tokens %llu", path, (unsigned long long)types->offset,
                   (unsigned long long)types->count, (unsigned long long)tokens->count);
        return NULL;
    }
    if (tokens->count == 0 || tokens->count > 1u << 24) {
        model_errf(err, errlen, "%s: byte %llu: key tokenizer.ggml.tokens has %llu tokens (1 to "
                   "2^24 supported)", path, (unsigned long long)tokens->offset,
                   (unsigned long long)tokens->count);
        return NULL;
    }
    json_t *root = json_object(), *vocab = json_object(), *added = json_array(),
           *mlist = json_array(), *model = NULL;
    int bad = !root || !vocab || !added || !mlist;
    for (uint64_t i = 0; i < tokens->count && !bad; i++) {
        const char *s;
        size_t len;
        gguf_array_string(tokens, i, &s, &len);
        int64_t type = types ? gguf_array_int(types, i) : TT_NORMAL;
        json_t *str = json_stringn(s, len);
        if (!str || len == 0) {
            json_decref(str);
            model_errf(err, errlen, "%s: byte %llu: tokenizer.ggml.tokens[%llu] is empty or not "
                       "valid UTF-8", path, (unsigned long long)tokens->offset,
                       (unsigned long long)i);
            goto fail;
        }
        if (type == TT_CONTROL || type == TT_USER) {
            json_incref(str);
            bad |= json_array_append_new(added, json_pack("{s:I,s:o,s:b,s:b,s:b,s:b,s:b}", "id",
                                         (json_int_t)i, "content", str, "single_word", 0,
                                         "lstrip", 0, "rstrip", 0, "normalized", 0, "special",
                                         type == TT_CONTROL));
            /* and in model.vocab under its id, as HF's own files have them:
             * HF tokenizers gives an added token that the vocabulary lacks
             * the next id after the vocabulary's size, whatever id the file
             * says (SmolLM2's <|im_end|> became 49137, a "Maya" of the
             * vocabulary, instead of 2) */
        } else if (type == TT_BYTE) {
            json_decref(str);
            model_errf(err, errlen, "%s: tokenizer.ggml.tokens[%llu] has token_type 6 (byte), "
                       "which only SentencePiece tokenizers use", path, (unsigned long long)i);
            goto fail;
        }
        if (json_object_get(vocab, json_string_value(str))) {
            model_errf(err, errlen, "%s: tokenizer.ggml.tokens[%llu] \"%s\" appears twice", path,
                       (unsigned long long)i, json_string_value(str));
            json_decref(str);
            goto fail;
        }
        bad |= add(vocab, json_string_value(str), json_integer((json_int_t)i));
        json_decref(str);
    }
    for (uint64_t i = 0; i < merges->count && !bad; i++) {
        const char *s;
        size_t len;
        gguf_array_string(merges, i, &s, &len);
        json_t *m = json_stringn(s, len);
        if (!m) {
            model_errf(err, errlen, "%s: tokenizer.ggml.merges[%llu] is not valid UTF-8", path,
                       (unsigned long long)i);
            goto fail;
        }
        bad |= json_array_append_new(mlist, m);
    }
    model = json_pack("{s:s,s:n,s:n,s:n,s:n,s:b,s:b,s:b,s:o,s:o}", "type", "BPE", "dropout",
                      "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
                      0, "byte_fallback", 0, "ignore_merges", 0, "vocab", vocab, "merges", mlist);
    vocab = mlist = NULL;
    bad |= !model || add(root, "version", json_string("1.0")) ||
           add(root, "truncation", json_null()) || add(root, "padding", json_null()) ||
           add(root, "added_tokens", added) || add(root, "normalizer", json_null()) ||
           add(root, "pre_tokenizer", pre_tokenizer(pre)) ||
           add(root, "post_processor", json_null()) || add(root, "decoder", bytelevel(true)) ||
           add(root, "model", model);
    added = model = NULL;
    if (!bad) return root;
    model_errf(err, errlen, "%s: out of memory building tokenizer.json", path);
fail:
    json_decref(root);
    json_decref(vocab);
    json_decref(added);
    json_decref(mlist);
    return NULL;
}

static int write_chunk(const char *buf, size_t size, void *data)
{
    return atomic_file_write(data, buf, size);
}

static int write_json(json_t *root, const char *path, char *err, size_t errlen)
{
    atomic_file af;
    if (atomic_file_begin(&af, path, err, errlen)) return -1;
    json_dump_callback(root, write_chunk, &af, JSON_INDENT(2));
    atomic_file_write(&af, "\n", 1);
    return atomic_file_commit(&af, err, errlen);
}

int gguf_tokenizer_write(const gguf_file *f, const char *path, char *err, size_t errlen)
{
    char *pre;
    if (check_model(f, &pre, err, errlen)) return -1;
    json_t *root = build(f, pre, err, errlen);
    free(pre);
    if (!root) return -1;
    int rc = write_json(root, path, err, errlen);
    json_decref(root);
    return rc;
}

/* The token with id key's value, as a JSON string; NULL when absent. */
static int token_of(const gguf_file *f, const char *key, json_t **out, char *err, size_t errlen)
{
    int64_t id = -1;
    const gguf_kv *tokens = gguf_kv_find(f, "tokenizer.ggml.tokens");
    *out = NULL;
    int rc = gguf_get_int(f, key, false, &id, err, errlen);
    if (rc) return rc < 0 ? -1 : 0;
    if (!tokens || tokens->type != GGUF_ARRAY || tokens->elem_type != GGUF_STRING || id < 0 ||
        (uint64_t)id >= tokens->count)
        return model_errf(err, errlen, "%s: key %s is %lld, not a token id", gguf_path(f), key,
                          (long long)id);
    const char *s;
    size_t len;
    gguf_array_string(tokens, (uint64_t)id, &s, &len);
    *out = json_stringn(s, len);
    return 0;
}

int gguf_tokenizer_config_write(const gguf_file *f, const char *path, char *err, size_t errlen)
{
    json_t *root = json_pack("{s:s}", "tokenizer_class", "PreTrainedTokenizerFast"), *tok;
    char *tmpl = NULL;
    int rc = -1;
    if (!root) return model_errf(err, errlen, "%s: out of memory", path);
    static const char *const keys[][2] = {{"tokenizer.ggml.bos_token_id", "bos_token"},
                                          {"tokenizer.ggml.eos_token_id", "eos_token"},
                                          {"tokenizer.ggml.padding_token_id", "pad_token"}};
    for (int i = 0; i < 3; i++) {
        if (token_of(f, keys[i][0], &tok, err, errlen)) goto out;
        if (tok) add(root, keys[i][1], tok);
    }
    if (gguf_get_string(f, "tokenizer.chat_template", false, &tmpl, err, errlen) < 0) goto out;
    if (tmpl) add(root, "chat_template", json_string(tmpl));
    rc = write_json(root, path, err, errlen);
out:
    free(tmpl);
    json_decref(root);
    return rc;
}

/* tokenizer_internal.h — what tokenizer.c, tokenizer_split.c,
 * tokenizer_json.c and tokenizer_train.c share; not part of model.h's API.
 *
 * A token is a byte string. Ids may have holes (a tokenizer.json need not
 * number its vocabulary densely); a hole has no TOK_PRESENT flag. */
#ifndef SHARDNODE_TOKENIZER_INTERNAL_H
#define SHARDNODE_TOKENIZER_INTERNAL_H

#include "model.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* Ids above this are refused: arrays are indexed by id. */
#define TOK_MAX_ID (1 << 24)

/* The split regex of GPT-2 (HF's ByteLevel with use_regex true). */
#define TOK_GPT2_PATTERN \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

enum {
    TOK_PRESENT = 1,
    TOK_MODEL = 2,     /* listed in model.vocab */
    TOK_RAW = 4,       /* its string is not in the byte alphabet: bytes = its UTF-8 */
    TOK_ADDED = 8,     /* listed in added_tokens */
    TOK_SPECIAL = 16,  /* an added token with special: true */
};

typedef enum {
    TOK_PRE_BYTELEVEL,   /* ByteLevel alone, use_regex true or false */
    TOK_PRE_SPLIT,       /* Sequence [Split {Regex|String, Isolated}, ByteLevel {use_regex false}] */
} tok_pre_style;

/* Open-addressing table of token ids keyed by their bytes (compared in the
 * tokenizer's byte pool, so it stores ids only). */
typedef struct {
    int32_t *slots;   /* -1: empty */
    size_t cap;       /* power of two */
    size_t count;
} tok_idmap;

/* Open-addressing table (left id, right id) -> (rank, merged id). */
typedef struct {
    uint64_t *keys;   /* UINT64_MAX: empty */
    int32_t *rank, *merged;
    size_t cap, count;
} tok_pairmap;

struct tokenizer {
    int32_t ntok;             /* id space [0, ntok) */
    int32_t captok;
    uint32_t *off, *len;      /* per id: its bytes in `bytes` */
    uint8_t *flags;
    char *bytes;
    size_t nbytes, capbytes;
    int32_t byte_id[256];     /* the single-byte token of each byte */
    tok_idmap vocab;          /* bytes of model.vocab tokens (not raw) -> id */

    int32_t nmerges, capmerges;
    int32_t *merges;          /* [left, right] per merge, in rank order */
    tok_pairmap pairs;

    int32_t nadded, capadded;
    int32_t *added;           /* ids of added_tokens, in file order */

    tok_pre_style style;
    char *pattern;            /* split regex as written in the file; NULL: none */
    bool pattern_literal;     /* Split {String: ...} rather than {Regex: ...} */
    bool add_prefix_space;
    bool ignore_merges;       /* model.ignore_merges: a chunk in the vocabulary is one token */
    pcre2_code *re;
    int32_t eos_config;       /* tokenizer_config.json's eos_token; -1: none */
};

/* ---- tokenizer.c ---- */
/* GPT-2's bytes_to_unicode: the printable code point standing for a byte
 * in the strings of tokenizer.json, and back (-1: not in the alphabet). */
uint32_t tok_byte_to_cp(unsigned char b);
int tok_cp_to_byte(uint32_t cp);
/* Length of the valid UTF-8 sequence at s (strict: no overlong forms, no
 * surrogates, at most U+10FFFF), or 0 if the bytes there are not one. */
size_t tok_utf8_valid(const unsigned char *s, size_t len, uint32_t *cp);
size_t tok_utf8_put(uint32_t cp, char *out);
uint64_t tok_hash_bytes(const void *p, size_t n);

tokenizer *tok_new(void);
/* Gives id the bytes (copied) and flags; grows the id space. */
int tok_set_token(tokenizer *t, int32_t id, const char *b, size_t n, uint8_t flags);
/* The token as tokenizer.json spells it (byte alphabet, or the raw string);
 * malloc'ed, NULL when out of memory. */
char *tok_token_string(const tokenizer *t, int32_t id);
/* Id of the model token with these bytes, or -1. */
int32_t tok_lookup(const tokenizer *t, const char *b, size_t n);
/* Indexes one model token by its bytes (bytes already indexed keep their
 * id). */
int tok_index_token(tokenizer *t, int32_t id);
/* Indexes the model tokens (raw ones left out) in id order and finds the
 * byte tokens; fails if a byte has no token. */
int tok_index_vocab(tokenizer *t, const char *src, char *err, size_t errlen);
/* Appends a merge of rank nmerges; the merged token must be in the
 * vocabulary. A repeated pair takes the later rank, as HF does. */
int tok_add_merge(tokenizer *t, int32_t a, int32_t b, const char *src, char *err,
                  size_t errlen);
int tok_add_added(tokenizer *t, int32_t id);
/* ---- tokenizer_split.c ---- */
/* Compiles the split regex (NULL: none) with PCRE2. */
int tok_set_pretokenizer(tokenizer *t, tok_pre_style style, const char *pattern,
                         bool literal, bool add_prefix_space, const char *src, char *err,
                         size_t errlen);

/* Calls fn on every pre-tokenized chunk of text, in order; the chunks
 * cover the text exactly. Added tokens are not looked for here. */
typedef int (*tok_chunk_fn)(void *ctx, const char *chunk, size_t len);
typedef struct tok_splitter tok_splitter;
tok_splitter *tok_splitter_new(const tokenizer *t);
void tok_splitter_free(tok_splitter *s);
int tok_split(tok_splitter *s, const char *text, size_t len, tok_chunk_fn fn, void *ctx,
              char *err, size_t errlen);

/* Strings cut out of a text before it is split (added tokens). */
typedef struct {
    int n;
    const char *const *strs;
    const size_t *lens;
    bool first[256];    /* some string starts with this byte */
} tok_matchset;

void tok_matchset_init(tok_matchset *m, const char *const *strs, const size_t *lens, int n);
/* Leftmost, then longest, occurrence in text of one of the strings: its
 * index, or -1; its start in *pos. */
int tok_matchset_find(const tok_matchset *m, const char *text, size_t len, size_t *pos);

#endif

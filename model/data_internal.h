/* data_internal.h — what data.c (cache, batches) shares with data_build.c
 * (reading and tokenizing corpora). Not part of model.h's API. */
#ifndef SHARDNODE_DATA_INTERNAL_H
#define SHARDNODE_DATA_INTERNAL_H

#include "model.h"

#define DATA_IGNORE (-100)   /* label of a position that is not learned */

/* A growable array of int32 / int64 / bytes. */
typedef struct { int32_t *p; size_t n, cap; } data_i32s;
typedef struct { int64_t *p; size_t n, cap; } data_i64s;
typedef struct { char *p; size_t n, cap; } data_chars;

int data_i32s_push(data_i32s *v, const int32_t *src, size_t n);
int data_i64s_push(data_i64s *v, int64_t x);
/* Appends n bytes and keeps p NUL-terminated. */
int data_chars_push(data_chars *v, const char *src, size_t n);

/* One side (train or validation) as built, in the layout of the cache:
 * text: n windows of T+1 tokens, back to back in tok;
 * JSONL: example e is ids tok[off[e] .. off[e+1]) with labels lab[same],
 *        at most T of each (the T+1st token is only ever a label). */
typedef struct {
    int64_t n;
    data_i32s tok, lab;
    data_i64s off;
} data_side;

typedef struct {
    data_side train, val;
    data_info info;
} data_built;

/* Read and tokenize spec's corpus (data_build.c). */
int data_build(data_built *b, const data_spec *spec, const tokenizer *tok, int32_t eos,
               char *err, size_t errlen);
void data_built_free(data_built *b);

/* Where document (or example) `index` falls in [0, 1): it goes to
 * validation when below val_fraction. A fixed hash, not the seed: the split
 * must not change when only the shuffling seed does. */
double data_split_point(uint64_t index);

#endif

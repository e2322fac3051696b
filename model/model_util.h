/* model_util.h — helpers private to model/: the message writer every
 * function that fails uses, and growable arrays. Not part of model.h. */
#ifndef SHARDNODE_MODEL_UTIL_H
#define SHARDNODE_MODEL_UTIL_H

#include <jansson.h>
#include <stddef.h>

/* Formats a message into err (NUL-terminated, truncated to errlen); returns
 * -1 so a failing function can `return model_errf(...)`. */
int model_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Rewrites s (a message in a buffer of cap bytes) on one line: control
 * characters echoed from a file (a newline inside a JSON string, a regex)
 * become \n, \t, \r or \xNN, cut to fit. model_errf does it to every
 * message, so no file can forge extra lines in a log. */
void model_one_line(char *s, size_t cap);
/* Makes room for `need` elements of `elem` bytes in *p (capacity *cap,
 * doubling). Returns 0, or -1 when out of memory (then *p is unchanged). */
int model_grow(void **p, size_t elem, size_t need, size_t *cap);

/* "an object", "a list", "a string", ...: what a JSON value is, for messages. */
const char *model_json_kind(const json_t *v);

#endif

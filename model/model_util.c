/* model_util.c — see model_util.h. */
#include "model_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int model_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        model_one_line(err, errlen);
    }
    return -1;
}

void model_one_line(char *s, size_t cap)
{
    size_t n = strlen(s), bad = 0;
    for (size_t i = 0; i < n; i++) bad += (unsigned char)s[i] < 0x20 || s[i] == 0x7f;
    if (!bad || cap == 0) return;
    char *copy = malloc(n + 1);
    if (!copy) {
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) s[i] = '?';
        return;
    }
    memcpy(copy, s, n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)copy[i];
        char esc[8];
        if (c == '\n') memcpy(esc, "\\n", 3);
        else if (c == '\t') memcpy(esc, "\\t", 3);
        else if (c == '\r') memcpy(esc, "\\r", 3);
        else if (c < 0x20 || c == 0x7f) snprintf(esc, sizeof esc, "\\x%02x", c);
        else esc[0] = (char)c, esc[1] = 0;
        size_t el = strlen(esc);
        if (o + el >= cap) break;
        memcpy(s + o, esc, el);
        o += el;
    }
    s[o] = 0;
    free(copy);
}

int model_grow(void **p, size_t elem, size_t need, size_t *cap)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

const char *model_json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "something else";
}

/* node_base.c — the helpers node/'s rooms share (node_base.h). */
#include "node_base.h"

#include "mesh.h"
#include "model.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int node_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void node_hex_encode(const uint8_t *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

int node_hex_decode(const char *s, uint8_t *b, size_t n)
{
    if (strlen(s) != 2 * n) return -1;
    for (size_t i = 0; i < 2 * n; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (v < 0) return -1;
        b[i / 2] = (uint8_t)(i % 2 ? (b[i / 2] << 4) | v : v);
    }
    return 0;
}

/* Node names go into file names, logs and gossip: keep them to a set that
 * needs no quoting anywhere. */
int node_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > MESH_NAME_MAX - 1) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '.' || *s == '_' || *s == '-'))
            return 0;
    return 1;
}

/* Writes j (and a newline) to path through atomic_file with the given mode,
 * set on the temporary file before anything is written to it. */
int node_write_json(const char *path, json_t *j, unsigned mode, char *err, size_t errlen)
{
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!text) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    atomic_file f;
    if (atomic_file_begin(&f, path, err, errlen) != 0) {
        free(text);
        return -1;
    }
    if (fchmod(f.fd, mode) != 0) {
        snprintf(err, errlen, "%s: cannot set mode %o: %s", f.tmp, (unsigned)mode,
                 strerror(errno));
        atomic_file_abort(&f);
        free(text);
        return -1;
    }
    atomic_file_write(&f, text, strlen(text));
    atomic_file_write(&f, "\n", 1);
    free(text);
    return atomic_file_commit(&f, err, errlen);
}

json_t *node_load_json(const char *path, char *err, size_t errlen)
{
    /* Opened here so a missing file reads "no such file" once, not inside
     * jansson's message that repeats the path. */
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    json_error_t je;
    json_t *j = json_loadf(f, 0, &je);
    fclose(f);
    if (!j) {
        if (je.line > 0)
            snprintf(err, errlen, "%s:%d: %s", path, je.line, je.text);
        else
            snprintf(err, errlen, "%s: %s", path, je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        snprintf(err, errlen, "%s: expected a JSON object", path);
        json_decref(j);
        return NULL;
    }
    return j;
}

const char *node_json_str(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int node_state_path(char *out, const char *dir, const char *name)
{
    int n = snprintf(out, NODE_PATH_MAX, "%s/%s", dir, name);
    return n < 0 || n >= NODE_PATH_MAX ? -1 : 0;
}

/* Private keys should not outlive their use in memory; a plain memset
 * before return may be optimised away, the volatile stores may not. */
void node_wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    while (n--) *v++ = 0;
}

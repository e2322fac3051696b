/* args.c — command-line options for the subcommands. */
#include "commands.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* The most characters of a user's word an error message repeats. */
#define ARGS_ECHO_MAX 64

int args_parse(int argc, char **argv, int first, const args_option *opts, int nopts,
               char *err, size_t errlen)
{
    for (int i = first; i < argc; i++) {
        const args_option *o = NULL;
        for (int k = 0; k < nopts; k++)
            if (strcmp(argv[i], opts[k].name) == 0) o = &opts[k];
        if (!o) {
            /* A word is echoed cut to a short prefix: a 100 KB token pasted
             * in the wrong place must not fill the terminal. */
            size_t len = strlen(argv[i]);
            snprintf(err, errlen, "%.*s%s: unknown %s", ARGS_ECHO_MAX, argv[i],
                     len > ARGS_ECHO_MAX ? "... (cut)" : "",
                     strncmp(argv[i], "--", 2) == 0 ? "option" : "argument");
            return -1;
        }
        if (o->flag) {
            *o->flag = true;
            continue;
        }
        if (i + 1 >= argc) {
            snprintf(err, errlen, "%s needs a value", argv[i]);
            return -1;
        }
        *o->value = argv[++i];
    }
    return 0;
}

int args_int(const char *text, const char *name, long min, long max, long *out, char *err,
             size_t errlen)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < min || v > max) {
        snprintf(err, errlen, "%s \"%.*s%s\": expected an integer in [%ld, %ld]", name,
                 ARGS_ECHO_MAX, text, strlen(text) > ARGS_ECHO_MAX ? "..." : "", min, max);
        return -1;
    }
    *out = v;
    return 0;
}

int args_require(const args_option *opts, int nopts, const char *const *required,
                 char *err, size_t errlen)
{
    for (; *required; required++)
        for (int k = 0; k < nopts; k++)
            if (strcmp(opts[k].name, *required) == 0 && opts[k].value && !*opts[k].value) {
                snprintf(err, errlen, "%s is required", *required);
                return -1;
            }
    return 0;
}

/* split.c — cut points to a chain of stages. */
#include "scheduler.h"
#include "sched_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int sched_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int split_parse(split_plan *plan, const char *spec, int num_layers, const char *flag,
                char *err, size_t errlen)
{
    plan->nstages = 1;
    plan->begin[0] = 0;
    plan->end[0] = num_layers;
    if (!spec || !*spec) return 0;
    const char *p = spec;
    int prev = -1, n = 0;
    while (*p) {
        char *endp;
        errno = 0;
        long cut = strtol(p, &endp, 10);
        if (endp == p || errno || (*endp && *endp != ',')) {
            snprintf(err, errlen, "%s \"%s\": expected comma-separated layer indices", flag,
                     spec);
            return -1;
        }
        if (cut < 0 || cut > num_layers) {
            snprintf(err, errlen, "%s \"%s\": cut %ld is outside [0, %d] (the model has %d layers)",
                     flag, spec, cut, num_layers, num_layers);
            return -1;
        }
        if (cut <= prev) {
            snprintf(err, errlen, "%s \"%s\": cuts must be strictly increasing (%ld after %d)",
                     flag, spec, cut, prev);
            return -1;
        }
        if (n + 2 > SPLIT_MAX_STAGES) {
            snprintf(err, errlen, "%s \"%s\": more than %d stages", flag, spec,
                     SPLIT_MAX_STAGES);
            return -1;
        }
        plan->end[n] = (int)cut;
        plan->begin[n + 1] = (int)cut;
        plan->end[n + 1] = num_layers;
        n++;
        prev = (int)cut;
        p = *endp ? endp + 1 : endp;
        if (*endp == ',' && !*p) {
            snprintf(err, errlen, "%s \"%s\": trailing comma", flag, spec);
            return -1;
        }
    }
    plan->nstages = n + 1;
    return 0;
}

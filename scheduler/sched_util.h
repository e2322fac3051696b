/* sched_util.h — private to scheduler/: the message writer its fallible
 * functions share. Not part of scheduler.h. */
#ifndef SHARDNODE_SCHED_UTIL_H
#define SHARDNODE_SCHED_UTIL_H

#include <stddef.h>

/* Formats a message into err (NUL-terminated, truncated to errlen); returns
 * -1 so a failing function can `return sched_errf(...)`. */
int sched_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif

/* check.h — the unit tests' one assertion: CHECK(cond, fmt, ...) prints
 * where and why when cond is false, counts the failure and carries on, so a
 * run reports every broken behaviour at once; main() returns failures != 0. */
#ifndef SHARDNODE_TEST_CHECK_H
#define SHARDNODE_TEST_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                \
    do {                                                \
        if (!(cond)) {                                  \
            failures++;                                 \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
            fflush(stdout);                             \
        }                                               \
    } while (0)

#endif

/* pool_lacks.c — what a member lacks of a job's files (pool_lacks, declared in
 * pool_job.h): the list pool_bundle_check fills, and which stages a member
 * lacking them can still hold. Split from pool_job.c for its size. */
#include "pool_job.h"

#include <stdlib.h>
#include <string.h>
#include <stdio.h>

int pool_lacks_add(pool_lacks *lacks, const char *role, const char *path, const char *local,
                   const char *why)
{
    pool_lack *n = realloc(lacks->l, (size_t)(lacks->n + 1) * sizeof *n);
    if (!n) return -1;
    lacks->l = n;
    pool_lack *l = &n[lacks->n];
    memset(l, 0, sizeof *l);
    snprintf(l->role, sizeof l->role, "%s", role ? role : "");
    l->path = strdup(path ? path : "");
    l->local = strdup(local ? local : "");
    l->why = strdup(why ? why : "");
    lacks->n++;
    return l->path && l->local && l->why ? 0 : -1;
}

void pool_lacks_free(pool_lacks *lacks)
{
    for (int i = 0; i < lacks->n; i++) {
        free(lacks->l[i].path);
        free(lacks->l[i].local);
        free(lacks->l[i].why);
    }
    free(lacks->l);
    memset(lacks, 0, sizeof *lacks);
}

int pool_lacks_copy(pool_lacks *dst, const pool_lacks *src)
{
    memset(dst, 0, sizeof *dst);
    for (int i = 0; i < src->n; i++)
        if (pool_lacks_add(dst, src->l[i].role, src->l[i].path, src->l[i].local,
                           src->l[i].why) != 0) {
            pool_lacks_free(dst);
            return -1;
        }
    return 0;
}

void pool_lacks_roles(const pool_lacks *lacks, bool *can_first, bool *can_any)
{
    bool first = true, any = true;
    for (int i = 0; lacks && i < lacks->n; i++) {
        const char *role = lacks->l[i].role;
        if (strcmp(role, "weights") == 0 || strcmp(role, "base") == 0) any = false;
        else first = false;   /* tokenizer, data */
    }
    *can_first = first && any;
    *can_any = any;
}

/* test_pool_fetch.c — what FETCH serves (pool_fetch, the handler a member
 * runs for any peer's FETCH): the stage files under jobs/ID/out/, and never
 * through a symbolic link. A link planted in a served path (the file itself,
 * or the out/ or jobs/ID/ folder) must be refused, or a member that can
 * write under jobs/ (or a job that names such a path) could read any file
 * the node can read, such as its keys. */
#include "daemon_internal.h"
#include "pool_job.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

#define ID "0123456789abcdef"

static char root[512];

static void write_file(const char *rel, const char *text)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    FILE *f = fopen(p, "w");
    if (!f || fputs(text, f) == EOF || fclose(f) != 0) {
        printf("cannot write %s\n", p);
        exit(2);
    }
}

static void make_link(const char *target, const char *rel)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    if (symlink(target, p) != 0) {
        printf("cannot link %s: %s\n", p, strerror(errno));
        exit(2);
    }
}

static void make_dir(const char *rel)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    mkdir(p, 0755);
}

/* FETCH path at offset 0 through the real handler: ok and the bytes, or the
 * reason. */
static int fetch(daemon_t *d, const char *path, char *got, size_t len, char *reason)
{
    gossip_msg m, r;
    memset(&m, 0, sizeof m);
    memset(&r, 0, sizeof r);
    snprintf(m.path, sizeof m.path, "%s", path);
    uint8_t *data = NULL;
    if (pool_fetch(d, &m, &r, &data) != 0) return -1;
    int ok = r.ok;
    if (ok) snprintf(got, len, "%.*s", (int)r.data_len, (const char *)r.data);
    snprintf(reason, 512, "%s", r.reason);
    free(data);
    return ok ? 0 : -1;
}

int main(void)
{
    snprintf(root, sizeof root, "%s/test_pool_fetch_%d", SHARDNODE_TEST_TMP, (int)getpid());
    mkdir(root, 0700);
    daemon_t *d = calloc(1, sizeof *d);
    snprintf(d->state, sizeof d->state, "%s/state", root);
    snprintf(d->name, sizeof d->name, "self");
    char secret[1024];
    snprintf(secret, sizeof secret, "%s/secret.key", root);
    write_file("secret.key", "the node's private key\n");
    make_dir("state");
    make_dir("state/jobs");
    make_dir("state/jobs/" ID);
    make_dir("state/jobs/" ID "/out");
    write_file("state/jobs/" ID "/out/stage-a.safetensors", "stage a\n");
    /* the file itself a link */
    make_link(secret, "state/jobs/" ID "/out/stage-b.safetensors");
    /* the out/ folder a link */
    make_dir("elsewhere");
    write_file("elsewhere/stage-c.safetensors", "outside the state directory\n");
    char outside[1024];
    snprintf(outside, sizeof outside, "%s/elsewhere", root);
    make_dir("state/jobs/fedcba9876543210");
    make_link(outside, "state/jobs/fedcba9876543210/out");
    /* the job's folder a link */
    make_link(outside, "state/jobs/aaaaaaaaaaaaaaaa");

    char got[256] = "", why[512] = "";
    CHECK(fetch(d, "jobs/" ID "/out/stage-a.safetensors", got, sizeof got, why) == 0 &&
              strcmp(got, "stage a\n") == 0,
          "a stage file is served: %s", why);
    got[0] = 0;
    CHECK(fetch(d, "jobs/" ID "/out/stage-b.safetensors", got, sizeof got, why) != 0 &&
              !strstr(got, "private") && strstr(why, "stage-b"),
          "a symbolic link to the node's key is served: \"%s\" (%s)", got, why);
    got[0] = 0;
    CHECK(fetch(d, "jobs/fedcba9876543210/out/stage-c.safetensors", got, sizeof got, why) != 0 &&
              !strstr(got, "outside"),
          "a file under a linked out/ folder is served: \"%s\" (%s)", got, why);
    got[0] = 0;
    CHECK(fetch(d, "jobs/aaaaaaaaaaaaaaaa/out/stage-c.safetensors", got, sizeof got, why) != 0 &&
              !strstr(got, "outside"),
          "a file under a linked job folder is served: \"%s\" (%s)", got, why);

    /* the opener on its own: a link is ELOOP, anything but a plain relative
     * path is refused */
    errno = 0;
    CHECK(pool_fetch_open(d->state, "jobs/" ID "/out/stage-b.safetensors") < 0 && errno == ELOOP,
          "a link: errno %d", errno);
    errno = 0;
    CHECK(pool_fetch_open(d->state, "jobs/fedcba9876543210/out/stage-c.safetensors") < 0 &&
              errno == ELOOP,
          "a linked folder: errno %d", errno);
    CHECK(pool_fetch_open(d->state, "jobs/" ID "/../" ID "/out/stage-a.safetensors") < 0,
          "\"..\" accepted");
    CHECK(pool_fetch_open(d->state, "/etc/passwd") < 0, "an absolute path accepted");
    CHECK(pool_fetch_open(d->state, "jobs/" ID "/out") < 0, "a folder accepted");
    int fd = pool_fetch_open(d->state, "jobs/" ID "/out/stage-a.safetensors");
    CHECK(fd >= 0, "a plain file refused: %s", strerror(errno));
    if (fd >= 0) close(fd);

    free(d);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) printf("cannot remove %s\n", root);
    printf("%s\n", failures ? "FAILED" : "test_pool_fetch: ok");
    return failures ? 1 : 0;
}

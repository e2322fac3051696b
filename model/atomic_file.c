/* atomic_file.c — write PATH.tmp, fsync, rename over PATH: a crash or an
 * error leaves the old file or the new one, never a torn one. */
#include "model.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int atomic_file_begin(atomic_file *f, const char *path, char *err, size_t errlen)
{
    size_t plen = strlen(path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = path;
    if (!(f->tmp = malloc(plen + 5))) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    memcpy(f->tmp, path, plen);
    memcpy(f->tmp + plen, ".tmp", 5);
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f->fd < 0) {
        snprintf(err, errlen, "%s: cannot create: %s", f->tmp, strerror(errno));
        free(f->tmp);
        f->tmp = NULL;
        return -1;
    }
    return 0;
}

int atomic_file_write(atomic_file *f, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0 && !f->error) {
        ssize_t w = write(f->fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            f->error = w < 0 ? errno : EIO; /* no progress and no errno: an I/O error */
            break;
        }
        p += w;
        len -= (size_t)w;
    }
    return f->error ? -1 : 0;
}

void atomic_file_abort(atomic_file *f)
{
    if (f->fd >= 0) close(f->fd);
    if (f->tmp) unlink(f->tmp);
    free(f->tmp);
    f->fd = -1;
    f->tmp = NULL;
}

/* The rename itself lives in the directory: sync it so a power loss after
 * commit cannot bring the old file back. Best effort (some filesystems
 * refuse fsync on directories); SIGKILL safety does not depend on it. */
static void sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

int atomic_file_commit(atomic_file *f, char *err, size_t errlen)
{
    if (!f->error && fsync(f->fd) != 0) f->error = errno;
    if (close(f->fd) != 0 && !f->error) f->error = errno; /* NFS reports errors here */
    f->fd = -1;
    if (f->error) {
        snprintf(err, errlen, "%s: write failed: %s", f->tmp, strerror(f->error));
    } else if (rename(f->tmp, f->path) != 0) {
        snprintf(err, errlen, "%s: cannot rename %s over it: %s", f->path, f->tmp,
                 strerror(errno));
        f->error = errno;
    } else {
        sync_dir(f->path);
        free(f->tmp);
        f->tmp = NULL;
        return 0;
    }
    atomic_file_abort(f);
    return -1;
}

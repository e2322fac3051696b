/* fuzz_util.h — what the file-decoder fuzz targets share: a failed check
 * aborts with a message (libFuzzer saves the input), and an input becomes a
 * file with exactly its bytes, in a private folder (on /dev/shm when there
 * is one, so atomic writes' fsync costs nothing), removed at exit.
 * Header-only: each target is one translation unit. */
#ifndef SHARDNODE_FUZZ_UTIL_H
#define SHARDNODE_FUZZ_UTIL_H

#include <dirent.h>
#include <sanitizer/common_interface_defs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The message also goes out as the sanitizers' SUMMARY line, which reaches
 * libFuzzer's output even under -close_fd_mask=2 (stderr closed). */
static inline void fuzz_require(int cond, const char *target, const char *what, const char *detail)
{
    if (!cond) {
        char line[1024];
        snprintf(line, sizeof line, "%s: %s%s%.600s", target, what, detail ? ": " : "",
                 detail ? detail : "");
        fprintf(stderr, "%s\n", line);
        __sanitizer_report_error_summary(line);
        abort();
    }
}

/* A refusal must come with a one-line message that fits its buffer. */
static inline void fuzz_check_refusal(const char *target, const char *err, size_t cap)
{
    fuzz_require(memchr(err, 0, cap) != NULL, target, "error message not NUL-terminated", NULL);
    fuzz_require(err[0] != 0, target, "refused without a message", NULL);
    fuzz_require(strchr(err, '\n') == NULL, target, "error message of several lines", err);
}

static char fuzz_dir_path[256];

/* Removes everything under path (files and folders), then path itself. */
static inline void fuzz_rm_rf(const char *path)
{
    DIR *dir = opendir(path);
    if (dir) {
        struct dirent *e;
        while ((e = readdir(dir)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            struct stat st;
            if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
                fuzz_rm_rf(sub);
            else
                unlink(sub);
        }
        closedir(dir);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static inline void fuzz_dir_cleanup(void)
{
    if (fuzz_dir_path[0])
        fuzz_rm_rf(fuzz_dir_path);
}

/* The target's private folder, made on first use. */
static inline const char *fuzz_dir(void)
{
    if (!fuzz_dir_path[0]) {
        struct stat st;
        const char *base = stat("/dev/shm", &st) == 0 && access("/dev/shm", W_OK) == 0
                               ? "/dev/shm"
                               : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/shardnode-fuzz-XXXXXX", base);
        fuzz_require(mkdtemp(fuzz_dir_path) != NULL, "fuzz", "cannot make a folder", base);
        atexit(fuzz_dir_cleanup);
    }
    return fuzz_dir_path;
}

/* Writes data[0..n) to NAME in the private folder; returns its path (a
 * static buffer per call site is the caller's business: copy it). */
static inline void fuzz_write_file(const char *name, const void *data, size_t n, char *path,
                            size_t pathlen)
{
    snprintf(path, pathlen, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    fuzz_require(f != NULL, "fuzz", "cannot write", path);
    fuzz_require((n == 0 || fwrite(data, 1, n, f) == n) && fclose(f) == 0, "fuzz",
                 "cannot write", path);
}

/* The input split at the first occurrence of sep (a part is empty when the
 * separator is absent): lets one input carry two files. */
static inline void fuzz_split(const uint8_t *data, size_t size, const char *sep, size_t *first_len,
                       const uint8_t **second, size_t *second_len)
{
    size_t sl = strlen(sep);
    for (size_t i = 0; i + sl <= size; i++)
        if (memcmp(data + i, sep, sl) == 0) {
            *first_len = i;
            *second = data + i + sl;
            *second_len = size - i - sl;
            return;
        }
    *first_len = size;
    *second = data + size;
    *second_len = 0;
}

#endif

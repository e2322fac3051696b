/* fuzz_util.h — what every fuzz target shares: a failed check aborts with a
 * message (libFuzzer saves the input); refusals are checked for a message;
 * an input is copied into a heap block of exactly its size (so ASan sees any
 * read past it), patched over a valid file, or becomes a file with exactly
 * its bytes, in a private folder (on /dev/shm when there is one, so atomic
 * writes' fsync costs nothing), removed at exit; a socket is fed the input
 * a piece at a time. Header-only: each target is one translation unit. */
#ifndef SHARDNODE_FUZZ_UTIL_H
#define SHARDNODE_FUZZ_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <sanitizer/common_interface_defs.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

/* A refusal must come with a message that fits its buffer (fill the buffer
 * with 'x' before the call, so a message left unterminated shows). */
static inline void fuzz_check_message(const char *target, const char *err, size_t cap)
{
    fuzz_require(memchr(err, 0, cap) != NULL, target, "error message not NUL-terminated", NULL);
    fuzz_require(err[0] != 0, target, "refused without a message", NULL);
}

/* ... and the decoders of files and of node/ give it on one line. */
static inline void fuzz_check_refusal(const char *target, const char *err, size_t cap)
{
    fuzz_check_message(target, err, cap);
    fuzz_require(strchr(err, '\n') == NULL, target, "error message of several lines", err);
}

/* A fixed Ed25519 secret key (RFC 8032 test 1's), for targets that sign what
 * they feed a decoder so the checks behind the signature are reached. */
#define FUZZ_RFC8032_TEST1_PRIV                                                                    \
    {0x9d, 0x61, 0xb1, 0x9d, 0xef, 0xfd, 0x5a, 0x60, 0xba, 0x84, 0x4a, 0xf4, 0x92, 0xec, 0x2c, 0xc4, \
     0x44, 0x49, 0xc5, 0x69, 0x7b, 0x32, 0x69, 0x19, 0x70, 0x3b, 0xac, 0x03, 0x1c, 0xae, 0x7f, 0x60}

/* data[0..n) in a heap block of exactly n bytes (under ASan a block of 0
 * bytes is a real one that no read may touch). Free it. */
static inline uint8_t *fuzz_copy(const uint8_t *data, size_t n)
{
    uint8_t *copy = malloc(n);
    fuzz_require(copy != NULL || n == 0, "fuzz", "out of memory", NULL);
    if (n)
        memcpy(copy, data, n);
    return copy;
}

/* data[0..n) and a NUL in a heap block of exactly n + 1 bytes: a string a
 * decoder may not read past. Free it. */
static inline char *fuzz_text(const uint8_t *data, size_t n)
{
    char *text = malloc(n + 1);
    fuzz_require(text != NULL, "fuzz", "out of memory", NULL);
    if (n)
        memcpy(text, data, n);
    text[n] = 0;
    return text;
}

/* The whole of the file at path in a heap block (one byte more than its
 * length, *len); free it. */
static inline uint8_t *fuzz_read_file(const char *target, const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    fuzz_require(f != NULL, target, "cannot read", path);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *bytes = malloc(*len + 1);
    fuzz_require(bytes && fread(bytes, 1, *len, f) == *len, target, "cannot read", path);
    fclose(f);
    return bytes;
}

/* The file at path as a string in buf (cut at cap - 1 bytes). */
static inline void fuzz_read_text(const char *target, const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    fuzz_require(f != NULL, target, "cannot read", path);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
}

/* A copy of valid[0..valid_len) damaged by the input, read as a list of
 * patches (offset: 2 bytes LE, byte): offset 0xffff cuts the copy to
 * byte/256 of its length, any other offset inside it sets that byte. Returns
 * the copy (free it) and its length in *len. */
static inline uint8_t *fuzz_patch(const uint8_t *valid, size_t valid_len, const uint8_t *data,
                                  size_t size, size_t *len)
{
    uint8_t *bytes = malloc(valid_len + 1);
    fuzz_require(bytes != NULL, "fuzz", "out of memory", NULL);
    memcpy(bytes, valid, valid_len);
    *len = valid_len;
    for (size_t i = 0; i + 3 <= size; i += 3) {
        size_t at = (size_t)data[i] | (size_t)data[i + 1] << 8;
        if (at == 0xffff)
            *len = data[i + 2] * *len / 256;
        else if (at < *len)
            bytes[at] = data[i + 2];
    }
    return bytes;
}

/* One step of feeding data[0..size) to a socket the other end reads: call
 * when poll says fd is writable and *shut is false. Sends what the socket
 * takes from *off on, and shuts the write side once all is sent or the
 * peer is gone (a send interrupted by libFuzzer's timer, SIGALRM, is tried
 * again at the next step). */
static inline void fuzz_send_step(int fd, const uint8_t *data, size_t size, size_t *off,
                                  bool *shut)
{
    ssize_t w = *off < size ? send(fd, data + *off, size - *off, MSG_NOSIGNAL) : 0;
    if (w < 0 && errno == EINTR)
        return;
    if (w > 0)
        *off += (size_t)w;
    if (w < 0 || *off == size) {
        shutdown(fd, SHUT_WR);
        *shut = true;
    }
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

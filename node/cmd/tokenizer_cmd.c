/* tokenizer_cmd.c — `shardnode tokenizer train|encode|decode`.
 *
 * encode and decode are filters (stdin to stdout) so that
 * `shardnode tokenizer encode ... | shardnode tokenizer decode ...` gives back
 * the input byte for byte. encode treats special-token text such as
 * "<|endoftext|>" as plain text unless --special is given: text from a
 * corpus must not smuggle in control tokens, and plain text round-trips. */
#include "commands.h"

#include "model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PREFIX "shardnode tokenizer: "
#define MAX_INPUTS 256

static void usage(FILE *out)
{
    fprintf(out,
            "usage: shardnode tokenizer train --input FILE [--input FILE ...] --vocab-size N\n"
            "                                 --out tokenizer.json [--special TOKEN ...]\n"
            "       shardnode tokenizer encode --tokenizer T.json [--special] [--input FILE]\n"
            "       shardnode tokenizer decode --tokenizer T.json [--input FILE]\n"
            "\n"
            "train   learns byte-level BPE merges (GPT-2 split regex) until the vocabulary\n"
            "        has N tokens: 256 bytes, the merges, then the special tokens\n"
            "        (default <|endoftext|>; --special may be repeated)\n"
            "encode  reads text (stdin or --input) and writes token ids on one line;\n"
            "        with --special, special-token text becomes the special token\n"
            "decode  reads whitespace-separated ids and writes the bytes they stand for\n");
}

/* Reads a whole file, or stdin when path is NULL. */
static int read_all(const char *path, char **out, size_t *len, char *err, size_t errlen)
{
    FILE *fp = path ? fopen(path, "rb") : stdin;
    const char *name = path ? path : "<stdin>";
    char *buf = NULL;
    size_t n = 0, cap = 0;
    if (!fp) {
        snprintf(err, errlen, "%s: cannot read: %s", name, strerror(errno));
        return -1;
    }
    for (;;) {
        if (n + 65536 + 1 > cap) {
            size_t c = cap ? cap * 2 : 1 << 20;
            char *b = realloc(buf, c);
            if (!b) {
                snprintf(err, errlen, "%s: out of memory after %zu bytes", name, n);
                goto fail;
            }
            buf = b;
            cap = c;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, fp);
        n += r;
        if (r == 0) break;
    }
    if (ferror(fp)) {
        snprintf(err, errlen, "%s: read failed: %s", name, strerror(errno));
        goto fail;
    }
    if (path) fclose(fp);
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
fail:
    if (path) fclose(fp);
    free(buf);
    return -1;
}

static int finish_stdout(void)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, PREFIX "<stdout>: write failed: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

static int cmd_train_tokenizer(int argc, char **argv)
{
    const char *inputs[MAX_INPUTS], *specials[MAX_INPUTS];
    char *rest[64];
    int ninputs = 0, nspecials = 0, nrest = 0, rc = 1;
    char err[512];
    /* --input and --special repeat, which args_parse does not do */
    for (int i = 3; i < argc; i++) {
        bool in = strcmp(argv[i], "--input") == 0, sp = strcmp(argv[i], "--special") == 0;
        if (in || sp) {
            if (i + 1 >= argc) {
                fprintf(stderr, PREFIX "%s needs a value\n", argv[i]);
                return 2;
            }
            if ((in ? ninputs : nspecials) >= MAX_INPUTS) {
                fprintf(stderr, PREFIX "%s: at most %d\n", argv[i], MAX_INPUTS);
                return 2;
            }
            if (in) inputs[ninputs++] = argv[++i];
            else specials[nspecials++] = argv[++i];
        } else if (nrest < 64) {
            rest[nrest++] = argv[i];
        } else {
            fprintf(stderr, PREFIX "too many arguments\n");
            return 2;
        }
    }
    const char *vocab_arg = NULL, *out_path = NULL;
    args_option opts[] = {{"--vocab-size", &vocab_arg, NULL}, {"--out", &out_path, NULL}};
    const char *required[] = {"--vocab-size", "--out", NULL};
    long vocab_size;
    if (nspecials == 0) specials[nspecials++] = "<|endoftext|>";
    if (args_parse(nrest, rest, 0, opts, 2, err, sizeof err) ||
        args_require(opts, 2, required, err, sizeof err) ||
        (ninputs == 0 && snprintf(err, sizeof err, "--input is required") > 0) ||
        args_int(vocab_arg, "--vocab-size", 256 + nspecials, 1 << 24, &vocab_size, err,
                 sizeof err)) {
        fprintf(stderr, PREFIX "%s\n", err);
        return 2;
    }

    char *texts[MAX_INPUTS] = {0};
    size_t lens[MAX_INPUTS], total = 0;
    tokenizer *t = NULL;
    for (int i = 0; i < ninputs; i++) {
        if (read_all(inputs[i], &texts[i], &lens[i], err, sizeof err)) {
            fprintf(stderr, PREFIX "%s\n", err);
            goto done;
        }
        total += lens[i];
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (tokenizer_train(&t, (const char *const *)texts, lens, ninputs, (int)vocab_size,
                        specials, nspecials, err, sizeof err) ||
        tokenizer_save(t, out_path, err, sizeof err)) {
        fprintf(stderr, PREFIX "%s\n", err);
        goto done;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    int v = tokenizer_vocab_size(t);
    printf("%s: %d tokens (256 bytes, %d merged, %d special) from %zu bytes in %.2f s\n",
           out_path, v, v - 256 - nspecials, nspecials, total, s);
    if (v < vocab_size)
        printf("%s: note: the corpus has no more pairs to merge; asked for %ld tokens\n",
               out_path, vocab_size);
    rc = finish_stdout();
done:
    for (int i = 0; i < ninputs; i++) free(texts[i]);
    tokenizer_free(t);
    return rc;
}

/* Loads --tokenizer and reads the input for encode and decode. */
static int open_filter(int argc, char **argv, bool *special, tokenizer **t, char **text,
                       size_t *len, const char **input_name)
{
    const char *tok_path = NULL, *input = NULL;
    bool is_encode = strcmp(argv[2], "encode") == 0;
    args_option opts[] = {{"--tokenizer", &tok_path, NULL},
                          {"--input", &input, NULL},
                          {"--special", NULL, special}};
    const char *required[] = {"--tokenizer", NULL};
    char err[512];
    if (args_parse(argc, argv, 3, opts, is_encode ? 3 : 2, err, sizeof err) ||
        args_require(opts, 3, required, err, sizeof err)) {
        fprintf(stderr, PREFIX "%s\n", err);
        return 2;
    }
    *input_name = input ? input : "<stdin>";
    if (tokenizer_load(t, tok_path, err, sizeof err) ||
        read_all(input, text, len, err, sizeof err)) {
        fprintf(stderr, PREFIX "%s\n", err);
        tokenizer_free(*t);
        *t = NULL;
        return 1;
    }
    return 0;
}

static int cmd_encode(int argc, char **argv)
{
    bool special = false;
    tokenizer *t;
    char *text, err[512];
    size_t len, n;
    int32_t *ids;
    const char *name;
    int rc = open_filter(argc, argv, &special, &t, &text, &len, &name);
    if (rc) return rc;
    if (tokenizer_encode(t, text, len, special, &ids, &n, err, sizeof err)) {
        fprintf(stderr, PREFIX "%s: %s\n", name, err);
        rc = 1;
    } else {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", (int)ids[i]);
        putchar('\n');
        free(ids);
        rc = finish_stdout();
    }
    free(text);
    tokenizer_free(t);
    return rc;
}

static int cmd_decode(int argc, char **argv)
{
    tokenizer *t;
    char *text, *out = NULL, err[512];
    size_t len, n = 0, cap = 0, outlen;
    int32_t *ids = NULL;
    const char *name;
    int rc = open_filter(argc, argv, NULL, &t, &text, &len, &name);
    if (rc) return rc;
    rc = 1;
    for (char *p = text + strspn(text, " \t\r\n\v\f"); *p || (size_t)(p - text) < len;) {
        char *end;
        size_t wlen = strcspn(p, " \t\r\n\v\f");
        errno = 0;
        long v = strtol(p, &end, 10);
        if (wlen == 0 || end != p + wlen || errno || v < INT32_MIN || v > INT32_MAX) {
            fprintf(stderr, PREFIX "%s: position %zu: \"%.*s\" is not a token id\n", name, n,
                    (int)(wlen > 40 ? 40 : wlen ? wlen : 1), p);
            goto done;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            int32_t *b = realloc(ids, cap * sizeof *ids);
            if (!b) {
                fprintf(stderr, PREFIX "%s: out of memory\n", name);
                goto done;
            }
            ids = b;
        }
        ids[n++] = (int32_t)v;
        p += wlen;
        p += strspn(p, " \t\r\n\v\f");
    }
    if (tokenizer_decode(t, ids, n, &out, &outlen, err, sizeof err)) {
        fprintf(stderr, PREFIX "%s: %s\n", name, err);
        goto done;
    }
    fwrite(out, 1, outlen, stdout);
    rc = finish_stdout();
done:
    free(out);
    free(ids);
    free(text);
    tokenizer_free(t);
    return rc;
}

int cmd_tokenizer(int argc, char **argv)
{
    const char *sub = argc > 2 ? argv[2] : "";
    if (strcmp(sub, "train") == 0) return cmd_train_tokenizer(argc, argv);
    if (strcmp(sub, "encode") == 0) return cmd_encode(argc, argv);
    if (strcmp(sub, "decode") == 0) return cmd_decode(argc, argv);
    if (strcmp(sub, "help") == 0 || strcmp(sub, "--help") == 0) {
        usage(stdout);
        return 0;
    }
    if (*sub) fprintf(stderr, PREFIX "unknown subcommand \"%s\"\n", sub);
    usage(stderr);
    return 2;
}

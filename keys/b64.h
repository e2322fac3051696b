/* b64.h — keys/ internal: the strict base64 codec keys.c and token.c share,
 * and their message writer.
 * Not part of the public interface (keys.h is). */
#ifndef SHARDNODE_KEYS_B64_H
#define SHARDNODE_KEYS_B64_H

#include <stddef.h>
#include <stdint.h>

/* Encodes n bytes; url selects base64url without padding, otherwise
 * standard base64 with '=' padding. out must hold b64_encoded_len + 1. */
size_t b64_encoded_len(size_t n, int url);
void b64_encode(const uint8_t *in, size_t n, int url, char *out);

/* Decodes exactly len characters. Strict: every character in the alphabet,
 * padding exactly as the encoder writes it (standard) or none (url), and the
 * unused low bits of the last character zero, so each byte string has one
 * text form and no character can change without changing the bytes.
 * On failure returns -1 with *bad_pos the offending character and *why a
 * static reason. */
int b64_decode(const char *in, size_t len, int url, uint8_t *out, size_t outcap,
               size_t *outlen, size_t *bad_pos, const char **why);

/* Formats a message into err (NUL-terminated, truncated to errlen); returns
 * -1 so a failing function can `return keys_errf(...)`. */
int keys_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif

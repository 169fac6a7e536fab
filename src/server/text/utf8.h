/* UTF-8 helpers that mirror Python's codecs: strict validation, U+FFFD replacement,
 * code point counting. */
#ifndef AIRLOCKD_UTF8_H
#define AIRLOCKD_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length of the valid sequence at s[0..n) (1..4), or 0 if it is not valid UTF-8
 * (overlongs, surrogates and values above U+10FFFF are invalid, as in Python). */
size_t utf8_seq_len(const unsigned char *s, size_t n, uint32_t *cp);

bool utf8_valid(const char *s, size_t n);

/* Number of code points (Python len()) of valid UTF-8. */
size_t utf8_count(const char *s, size_t n);

/* New NUL-terminated copy where every maximal invalid subpart becomes U+FFFD, like
 * bytes.decode("utf-8", errors="replace"). NULL only when out of memory. */
char *utf8_replace(const char *s, size_t n, size_t *out_len);

/* Bytes at the end of s[0..n) that begin a valid sequence not yet complete (0..3): a
 * stream cut there decodes the same once the rest follows (streaming exec keeps them for
 * the next piece). */
size_t utf8_partial_tail(const char *s, size_t n);

/* Appends the UTF-8 encoding of cp to out (needs 4 bytes); returns bytes written. */
size_t utf8_put(char *out, uint32_t cp);

#endif

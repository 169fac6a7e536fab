/* JSON string literals decoded as Python's json module decodes them, without holding the
 * decoded text: its size and length first, then its bytes in pieces. A file write's content
 * goes from the request body to the file this way, never copied whole (README "Limits"). */
#ifndef AIRLOCKD_JSTR_H
#define AIRLOCKD_JSTR_H

#include <stdbool.h>
#include <stddef.h>

/* The smallest out buffer jstr_decode accepts (one escape's UTF-8). */
#define JSTR_DECODE_MIN 4

/* s[0..n) is the inside of a literal that pyjson_check accepted (valid UTF-8, valid escapes).
 * *bytes: its UTF-8 size decoded; *chars: Python's len() of it (a \uXXXX surrogate pair is
 * one character). false when it holds a lone surrogate escape, which Python keeps but cannot
 * encode as UTF-8 (the reference fails such a write). */
bool jstr_measure(const char *s, size_t n, size_t *bytes, size_t *chars);

/* Decodes the literal from *pos on into out (cap ≥ JSTR_DECODE_MIN bytes), never cutting an
 * escape; advances *pos and returns the bytes produced, 0 at the end. The literal must have
 * passed jstr_measure. */
size_t jstr_decode(const char *s, size_t n, size_t *pos, char *out, size_t cap);

/* The end of the literal starting at s[i] == '"' in validated JSON: the index just past its
 * closing quote. */
size_t jstr_end(const char *s, size_t n, size_t i);

#endif

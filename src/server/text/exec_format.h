/* The exec response's `output` text (contract 1.7), byte-identical to the reference's
 * format_result, including Python's str.strip() over all Unicode whitespace. */
#ifndef AIRLOCKD_EXEC_FORMAT_H
#define AIRLOCKD_EXEC_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Python str.isspace() for one code point. */
bool py_isspace(uint32_t cp);

/* Python str.strip() on valid UTF-8: the stripped text is s[*start, *end). */
void py_strip(const char *s, size_t n, size_t *start, size_t *end);

/* Builds `output` from already U+FFFD-cleaned streams. Returns a malloc'd string
 * (NUL-terminated, length in *len) or NULL when out of memory. */
char *exec_format_output(const char *out, size_t out_len, const char *err, size_t err_len,
                         const char *const *warnings, size_t nwarnings, int exit_code,
                         bool timed_out, size_t *len);

#endif

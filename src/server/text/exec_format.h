/* The exec response's `output` text (contract 1.7), byte-identical to the reference's
 * format_result, including Python's str.strip() over all Unicode whitespace. */
#ifndef AIRLOCKD_EXEC_FORMAT_H
#define AIRLOCKD_EXEC_FORMAT_H

#include "text/pystr.h" /* py_strip: the format strips like Python */

#include <stdbool.h>
#include <stddef.h>

/* Builds `output` from already U+FFFD-cleaned streams. Returns a malloc'd string
 * (NUL-terminated, length in *len) or NULL when out of memory. */
char *exec_format_output(const char *out, size_t out_len, const char *err, size_t err_len,
                         const char *const *warnings, size_t nwarnings, int exit_code,
                         bool timed_out, size_t *len);

#endif

/* Python's str.isspace() and str.strip() for UTF-8 text, so trimmed texts (outputs, names,
 * rules, error details) match the reference server's to the byte. */
#ifndef AIRLOCKD_PYSTR_H
#define AIRLOCKD_PYSTR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Python str.isspace() for one code point. */
bool py_isspace(uint32_t cp);

/* Python str.strip() on valid UTF-8: the stripped text is s[*start, *end). */
void py_strip(const char *s, size_t n, size_t *start, size_t *end);

#endif

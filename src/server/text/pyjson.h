/* Mirrors where and why Python's json module rejects a request body, so the 422
 * json_invalid answer carries the same position and message as the reference. */
#ifndef AIRLOCKD_PYJSON_H
#define AIRLOCKD_PYJSON_H

#include <stddef.h>

/* Checks UTF-8 text s[0..n). Returns 0 when Python would accept it, 1 for a
 * JSONDecodeError (message in *msg, static string; code point position in *pos),
 * 2 when Python fails otherwise (nesting too deep). */
int pyjson_check(const char *s, size_t n, const char **msg, size_t *pos);

#endif

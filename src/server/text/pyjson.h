/* Python's json module, both ways: where and why json.loads rejects a request body (so the
 * 422 json_invalid answer carries the reference's position and message), and the text
 * json.dumps writes for a response. */
#ifndef AIRLOCKD_PYJSON_H
#define AIRLOCKD_PYJSON_H

#include <jansson.h>
#include <stddef.h>

/* Checks UTF-8 text s[0..n). Returns 0 when Python would accept it, 1 for a
 * JSONDecodeError (message in *msg, static string; code point position in *pos),
 * 2 when Python fails otherwise (nesting too deep). */
int pyjson_check(const char *s, size_t n, const char **msg, size_t *pos);

/* Serialises a JSON value the way Python's json.dumps(ensure_ascii=False,
 * separators=(",", ":")) does; malloc'd, NULL when out of memory. */
char *pyjson_dumps(const json_t *v);

#endif

/* Python repr() of strings and string lists, for error messages that quote them
 * (e.g. "Allowed: ['pypi.org', 'files.pythonhosted.org']"). */
#ifndef AIRLOCKD_PYREPR_H
#define AIRLOCKD_PYREPR_H

#include <jansson.h>
#include <stddef.h>

/* Returns a malloc'd repr of the UTF-8 string s[0..n), or NULL when out of memory. */
char *pyrepr_str(const char *s, size_t n);

/* repr() of a list of strings (non-strings are skipped); malloc'd or NULL. */
char *pyrepr_list(const json_t *array);

#endif
